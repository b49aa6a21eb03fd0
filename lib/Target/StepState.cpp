//===- StepState.cpp - what a step carries and what the host feeds --------===//

#include "moe/Target/StepState.h"

#include "moe/Dialect/Moe/MoeOps.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/SymbolTable.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::target;

static StringAttr stringArgAttr(FunctionOpInterface step, BlockArgument arg,
                                StringRef name) {
  return step.getArgAttrOfType<StringAttr>(arg.getArgNumber(), name);
}

ArgRole mlir::moe::target::roleOf(FunctionOpInterface step,
                                  BlockArgument arg) {
  if (stringArgAttr(step, arg, MoeDialect::getParamAttrName()))
    return ArgRole::param;
  if (stringArgAttr(step, arg, MoeDialect::getStateAttrName()))
    return ArgRole::state;
  if (stringArgAttr(step, arg, MoeDialect::getStepInputAttrName()))
    return ArgRole::stepInput;
  return ArgRole::input;
}

std::string mlir::moe::target::argumentName(FunctionOpInterface step,
                                            BlockArgument arg) {
  for (StringRef attr :
       {MoeDialect::getParamAttrName(), MoeDialect::getStateAttrName(),
        MoeDialect::getStepInputAttrName()})
    if (StringAttr name = stringArgAttr(step, arg, attr))
      return name.getValue().str();
  return "arg" + std::to_string(arg.getArgNumber());
}

SmallVector<BlockArgument>
mlir::moe::target::carriedArguments(FunctionOpInterface step) {
  SmallVector<BlockArgument> params, state;
  for (BlockArgument arg : step.getFunctionBody().front().getArguments()) {
    ArgRole role = roleOf(step, arg);
    if (role == ArgRole::param)
      params.push_back(arg);
    else if (role == ArgRole::state)
      state.push_back(arg);
  }
  params.append(state);
  return params;
}

llvm::Expected<moe_rt_lr_schedule>
mlir::moe::target::lrSchedule(FunctionOpInterface step) {
  auto fail = [](const Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "moe.lr_schedule: " + message);
  };
  auto dict =
      step->getAttrOfType<DictionaryAttr>(MoeDialect::getLrScheduleAttrName());
  if (!dict)
    return fail("the step has an lr input but no schedule");
  moe_rt_lr_schedule s{};
  auto kind = dict.getAs<StringAttr>("kind");
  auto lr = dict.getAs<FloatAttr>("lr");
  if (!kind || !lr)
    return fail("needs kind and lr");
  s.lr = lr.getValueAsDouble();
  if (kind.getValue() == "constant") {
    s.kind = MOE_RT_LR_CONSTANT;
    return s;
  }
  if (kind.getValue() != "cosine")
    return fail("unknown kind '" + kind.getValue() + "'");
  s.kind = MOE_RT_LR_COSINE;
  auto warmup = dict.getAs<IntegerAttr>("warmup");
  auto total = dict.getAs<IntegerAttr>("total");
  auto minLr = dict.getAs<FloatAttr>("min_lr");
  if (!warmup || !total || !minLr)
    return fail("cosine needs warmup, total and min_lr");
  s.warmup = warmup.getInt();
  s.total = total.getInt();
  s.min_lr = minLr.getValueAsDouble();
  if (s.warmup < 0 || s.total <= s.warmup)
    return fail("cosine needs 0 <= warmup < total");
  return s;
}

/// The parameter an optimizer-state argument belongs to (the update that
/// reads it), or `arg` itself.
static Value ownerParameter(BlockArgument arg) {
  for (Operation *user : arg.getUsers()) {
    if (auto adamw = dyn_cast<AdamWOp>(user))
      return adamw.getParam();
    if (auto sgd = dyn_cast<SgdMomentumOp>(user))
      return sgd.getParam();
  }
  return arg;
}

bool mlir::moe::target::isExpertArgument(FunctionOpInterface step,
                                         BlockArgument arg) {
  Value param = roleOf(step, arg) == ArgRole::state ? ownerParameter(arg)
                                                    : Value(arg);
  return llvm::any_of(param.getUsers(), [](Operation *u) {
    if (auto vjp = dyn_cast<VjpOp>(u))
      u = vjp.getForwardOp();
    return u && isa<ExpertOp>(u);
  });
}

int64_t mlir::moe::target::expertBlock(FunctionOpInterface step,
                                       BlockArgument arg) {
  Value param = roleOf(step, arg) == ArgRole::state ? ownerParameter(arg)
                                                    : Value(arg);
  for (Operation *u : param.getUsers()) {
    Operation *expert = u;
    if (auto vjp = dyn_cast<VjpOp>(u))
      expert = vjp.getForwardOp();
    if (!expert || !isa<ExpertOp>(expert))
      continue;
    // The forward op, or the vjp, carries the task.
    for (Operation *op : {u, expert})
      if (auto task = op->getAttrOfType<TaskAttr>(MoeDialect::getTaskAttrName()))
        if (task.getBlock() >= 0)
          return task.getBlock();
  }
  return -1;
}

moe_rt::checkpoint::Manifest
mlir::moe::target::checkpointManifest(FunctionOpInterface step,
                                      moe_rt::checkpoint::Counters counters) {
  namespace ckpt = moe_rt::checkpoint;
  ckpt::Manifest m;
  m.counters = counters;
  if (auto model =
          step->getAttrOfType<ModelAttr>(MoeDialect::getModelAttrName())) {
    SymbolTableCollection table;
    if (auto grid = table.lookupNearestSymbolFrom<shard::GridOp>(
            step.getOperation(), model.getGrid()))
      m.grid.assign(grid.getShape().begin(), grid.getShape().end());
    for (int16_t a : model.getEpAxes())
      m.epAxes.push_back(a);
  }
  m.ranks = 1;
  for (int64_t d : m.grid)
    m.ranks *= int(d);
  for (BlockArgument arg : carriedArguments(step)) {
    ckpt::LayoutEntry e;
    e.name = argumentName(step, arg);
    e.role = roleOf(step, arg) == ArgRole::param ? ckpt::Role::param
                                                 : ckpt::Role::state;
    e.layout = isExpertArgument(step, arg) ? ckpt::Layout::experts
                                           : ckpt::Layout::replicated;
    if (e.layout == ckpt::Layout::experts)
      e.block = expertBlock(step, arg);
    auto type = cast<RankedTensorType>(arg.getType());
    e.localShape.assign(type.getShape().begin(), type.getShape().end());
    m.tensors.push_back(std::move(e));
  }
  m.model = ckpt::fingerprint(m);
  return m;
}
