//===- BuildTrainStep.cpp - forward + backward + all-reduce + update ------===//
//
// FlowMoE §2.2 / §3: one training iteration is the forward pass, the
// backward pass (blocks in reverse, every task's adjoint), the all-reduce of
// replicated (MHA + gate) gradients AR^(l) and the parameter update. Expert
// parameters are local under expert parallelism and are not all-reduced.
//
//===----------------------------------------------------------------------===//

#include "OptimizerUpdates.h"

#include "moe/Analysis/GradientGroups.h"
#include "moe/Analysis/Tasks.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include <map>
#include <set>

namespace mlir::moe {
#define GEN_PASS_DEF_MOEBUILDTRAINSTEP
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

bool isFloatTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa<FloatType>(tensor.getElementType());
}

TaskAttr withPhase(TaskAttr task, Phase phase) {
  return TaskAttr::get(task.getContext(), task.getKind(), phase,
                       task.getBlock(), task.getMicro(), task.getChunk());
}

/// Step 1: label, then inline every moe.block into the function body.
void labelAndFlatten(FunctionOpInterface func, ModelAttr model) {
  MLIRContext *ctx = func->getContext();
  Block &entry = func.getFunctionBody().front();
  bool seenBlock = false;
  for (Operation &op : llvm::make_early_inc_range(entry)) {
    if (auto block = dyn_cast<BlockOp>(op)) {
      seenBlock = true;
      SmallVector<Operation *> ops;
      for (Operation &inner : block.getBody().front().without_terminator())
        ops.push_back(&inner);
      labelBlockForward(ops, block.getIndex(), 0, model.getLayers());
      continue;
    }
    if (getTask(&op) || op.hasTrait<OpTrait::IsTerminator>())
      continue;
    // Outside blocks: embeddings before the first block, head after.
    setTask(&op, TaskAttr::get(ctx, seenBlock ? TaskKind::HEAD : TaskKind::PRE,
                               Phase::fwd, -1, 0, -1));
  }
  for (auto block : llvm::make_early_inc_range(entry.getOps<BlockOp>())) {
    Block &body = block.getBody().front();
    auto yield = cast<YieldOp>(body.getTerminator());
    for (auto [arg, input] : llvm::zip(body.getArguments(), block.getInputs()))
      arg.replaceAllUsesWith(input);
    block.replaceAllUsesWith(yield.getOperands());
    yield.erase();
    entry.getOperations().splice(block->getIterator(), body.getOperations());
    block.erase();
  }
  // split(merge(...)) folds: micro-batch r of block l feeds micro-batch r of
  // block l+1 directly.
  for (auto split : llvm::make_early_inc_range(entry.getOps<SplitOp>())) {
    SmallVector<OpFoldResult> folded;
    if (succeeded(split->fold(folded)) && !folded.empty()) {
      for (auto [result, replacement] : llvm::zip(split.getResults(), folded))
        result.replaceAllUsesWith(cast<Value>(replacement));
      split.erase();
    }
  }
  for (auto merge : llvm::make_early_inc_range(entry.getOps<MergeOp>()))
    if (merge->use_empty())
      merge.erase();
  // Merges and splits left at the ends (before the head, after the
  // embedding) belong to the task next to them.
  for (Operation &op : entry)
    if (isa<SplitOp, MergeOp>(op) && !getTask(&op))
      setTask(&op, TaskAttr::get(
                       ctx, isa<MergeOp>(op) ? TaskKind::HEAD : TaskKind::PRE,
                       Phase::fwd, -1, 0, -1));
}

/// Step 2: reverse-mode differentiation of the flat forward body.
class Differentiator {
public:
  Differentiator(OpBuilder &builder) : builder(builder) {}

  /// Adds `contribution` to the cotangent of `value`.
  void accumulate(Value value, Value contribution, TaskAttr task,
                  Location loc) {
    auto [it, inserted] = cotangents.try_emplace(value, contribution);
    if (inserted)
      return;
    auto sum = arith::AddFOp::create(builder, loc, it->second, contribution);
    setTask(sum, task);
    it->second = sum;
  }

  Value cotangent(Value value) { return cotangents.lookup(value); }

  /// A zero cotangent for a result nobody differentiates through.
  FailureOr<Value> zeros(Value like, TaskAttr task, Location loc) {
    auto type = cast<RankedTensorType>(like.getType());
    if (!type.hasStaticShape())
      return emitError(loc) << "moe-build-train-step: needs a zero cotangent "
                               "of dynamic type "
                            << type;
    auto zero = arith::ConstantOp::create(
        builder, loc, type,
        DenseElementsAttr::get(
            type, builder.getFloatAttr(type.getElementType(), 0.0)));
    setTask(zero, task);
    return Value(zero);
  }

  LogicalResult backward(Operation *op) {
    Location loc = op->getLoc();
    TaskAttr task = withPhase(getTask(op), Phase::bwd);
    // Cotangents of the float results; skip ops nothing depends on.
    SmallVector<Value> resultCts;
    bool any = false;
    for (Value result : op->getResults()) {
      if (!isFloatTensor(result.getType()))
        continue;
      Value ct = cotangent(result);
      any |= static_cast<bool>(ct);
      resultCts.push_back(ct);
    }
    if (!any)
      return success();
    for (auto [i, result] :
         llvm::enumerate(llvm::make_filter_range(op->getResults(), [](Value v) {
           return isFloatTensor(v.getType());
         }))) {
      if (resultCts[i])
        continue;
      FailureOr<Value> zero = zeros(result, task, loc);
      if (failed(zero))
        return failure();
      resultCts[i] = *zero;
    }

    if (auto add = dyn_cast<arith::AddFOp>(op)) {
      accumulate(add.getLhs(), resultCts[0], task, loc);
      accumulate(add.getRhs(), resultCts[0], task, loc);
      return success();
    }
    if (auto split = dyn_cast<SplitOp>(op)) {
      auto merge =
          MergeOp::create(builder, loc, split.getInput().getType(), resultCts);
      setTask(merge, task);
      accumulate(split.getInput(), merge, task, loc);
      return success();
    }
    if (auto merge = dyn_cast<MergeOp>(op)) {
      auto split = SplitOp::create(builder, loc, merge.getInputs().getTypes(),
                                   resultCts[0]);
      setTask(split, task);
      for (auto [input, ct] : llvm::zip(merge.getInputs(), split.getResults()))
        accumulate(input, ct, task, loc);
      return success();
    }
    // Expert sharding's collectives are each other's adjoint (FSMoE Fig. 2):
    // the backward gathers what the forward scattered and vice versa, as a
    // collective of its own rather than a vjp.
    if (auto gather = dyn_cast<shard::AllGatherOp>(op)) {
      auto scatter = shard::ReduceScatterOp::create(
          builder, loc, gather.getInput().getType(), gather.getGridAttr(),
          gather.getGridAxesAttr(), resultCts[0],
          shard::ReductionKindAttr::get(op->getContext(),
                                        shard::ReductionKind::Sum),
          gather.getGatherAxisAttr());
      setTask(scatter, task);
      accumulate(gather.getInput(), scatter, task, loc);
      return success();
    }
    if (auto scatter = dyn_cast<shard::ReduceScatterOp>(op)) {
      if (scatter.getReduction() != shard::ReductionKind::Sum)
        return op->emitOpError() << "cannot be differentiated by "
                                    "moe-build-train-step (only a sum)";
      auto gather = shard::AllGatherOp::create(
          builder, loc, scatter.getInput().getType(), scatter.getGridAttr(),
          scatter.getGridAxesAttr(), resultCts[0], scatter.getScatterAxisAttr());
      setTask(gather, task);
      accumulate(scatter.getInput(), gather, task, loc);
      return success();
    }
    if (op->getDialect() != op->getContext()->getLoadedDialect<MoeDialect>() ||
        op->getNumRegions() != 0)
      return op->emitOpError()
             << "cannot be differentiated by moe-build-train-step";

    // The generic backward task: moe.vjp around a copy of the op.
    SmallVector<Type> gradTypes;
    for (Type t : op->getOperandTypes())
      if (isFloatTensor(t))
        gradTypes.push_back(t);
    auto vjp =
        VjpOp::create(builder, loc, gradTypes, op->getOperands(), resultCts);
    setTask(vjp, task);
    Block *body = new Block();
    vjp.getBody().push_back(body);
    IRMapping map;
    for (Value operand : op->getOperands())
      map.map(operand, body->addArgument(operand.getType(), operand.getLoc()));
    OpBuilder inner = OpBuilder::atBlockEnd(body);
    Operation *copy = inner.clone(*op, map);
    copy->removeAttr(MoeDialect::getTaskAttrName());
    copy->removeAttr(MoeDialect::getStreamAttrName());
    YieldOp::create(inner, loc, copy->getResults());
    unsigned g = 0;
    for (Value operand : op->getOperands())
      if (isFloatTensor(operand.getType()))
        accumulate(operand, vjp.getResult(g++), task, loc);
    return success();
  }

private:
  OpBuilder &builder;
  DenseMap<Value, Value> cotangents;
};

struct BuildTrainStepPass
    : public moe::impl::MoeBuildTrainStepBase<BuildTrainStepPass> {
  using MoeBuildTrainStepBase::MoeBuildTrainStepBase;

  LogicalResult buildStep(FunctionOpInterface func, ModelAttr model) {
    MLIRContext *ctx = &getContext();
    if (func.getFunctionBody().getBlocks().size() != 1)
      return mlir::emitError(func.getLoc())
             << "moe-build-train-step: the model must be one "
                "block of straight-line code";
    Block &entry = func.getFunctionBody().front();
    if (llvm::any_of(entry, [](Operation &op) { return isa<VjpOp>(op); }))
      return mlir::emitError(func.getLoc())
             << "moe-build-train-step: the function is "
                "already a training step";
    auto ret = dyn_cast<func::ReturnOp>(entry.getTerminator());
    if (!ret || ret.getNumOperands() != 1 ||
        ret.getOperand(0).getType() !=
            RankedTensorType::get({}, Float32Type::get(ctx)))
      return mlir::emitError(func.getLoc())
             << "moe-build-train-step: the model must return "
                "its loss as one tensor<f32>";
    labelAndFlatten(func, model);

    SymbolTableCollection table;
    FailureOr<shard::GridOp> grid = lookupGrid(func, model.getGrid(), table);
    if (failed(grid))
      return failure();
    FailureOr<int64_t> dpSize = verifyGroupSize(func, *grid, model.getDpAxes());
    if (failed(dpSize))
      return failure();

    Value loss = ret.getOperand(0);
    SmallVector<Operation *> forward;
    for (Operation &op : entry.without_terminator())
      forward.push_back(&op);

    OpBuilder builder(ret);
    Differentiator diff(builder);
    TaskAttr headBwd =
        TaskAttr::get(ctx, TaskKind::HEAD, Phase::bwd, -1, 0, -1);
    auto lossType = cast<RankedTensorType>(loss.getType());
    auto seed = arith::ConstantOp::create(
        builder, loss.getLoc(), lossType,
        DenseElementsAttr::get(lossType,
                               builder.getF32FloatAttr(1.0f / *dpSize)));
    setTask(seed, headBwd);
    diff.accumulate(loss, seed, headBwd, loss.getLoc());
    for (Operation *op : llvm::reverse(forward))
      if (failed(diff.backward(op)))
        return failure();

    // Which block uses each parameter, and which ranks share its gradient
    // (GradientGroups.h): replicated weights are reduced over dp_axes;
    // tensor-parallel attention's shards (moe-tensor-parallel) over the
    // nodes only, a node's ranks holding different heads; experts not.
    std::map<int64_t, SmallVector<BlockArgument>> denseByBlock;
    std::map<int64_t, SmallVector<BlockArgument>> headShardsByBlock;
    SmallVector<std::pair<BlockArgument, Value>> updates;
    DenseMap<BlockArgument, GradientGroups> groups;
    for (BlockArgument arg : entry.getArguments()) {
      if (!func.getArgAttr(arg.getArgNumber(), MoeDialect::getParamAttrName()))
        continue;
      Value grad = diff.cotangent(arg);
      if (!grad)
        return mlir::emitError(func.getLoc())
               << "moe-build-train-step: parameter #" << arg.getArgNumber()
               << " does not influence the loss";
      int64_t block = -1;
      for (Operation *user : arg.getUsers())
        if (TaskAttr t = getTask(user); t && t.getPhase() == Phase::fwd)
          block = std::max(block, t.getBlock());
      GradientGroups g = gradientGroups(func, model, arg);
      updates.push_back({arg, grad});
      if (g.headShard)
        headShardsByBlock[block].push_back(arg);
      else if (!g.expert)
        denseByBlock[block].push_back(arg);
      groups[arg] = std::move(g);
    }

    // AR^(l): one all-reduce per block and group of its replicated
    // gradients, blocks in backward order; -1 holds the weights outside
    // blocks.
    DenseMap<Value, Value> reduced;
    auto reduceOver = [&](int64_t block, ArrayRef<BlockArgument> args) {
      SmallVector<Value> grads;
      for (BlockArgument arg : args)
        grads.push_back(diff.cotangent(arg));
      auto allReduce = AllReduceOp::create(
          builder, func.getLoc(), grads, model.getGrid(),
          builder.getDenseI16ArrayAttr(groups[args.front()].reduce),
          /*bytes=*/nullptr);
      setTask(allReduce,
              TaskAttr::get(ctx, TaskKind::AR, Phase::bwd, block, 0, -1));
      for (auto [arg, result] : llvm::zip(args, allReduce.getResults()))
        reduced[arg] = result;
    };
    std::set<int64_t> blocks;
    for (auto *byBlock : {&denseByBlock, &headShardsByBlock})
      for (auto &entry : *byBlock)
        blocks.insert(entry.first);
    for (int64_t block : llvm::reverse(blocks)) {
      if (auto it = denseByBlock.find(block); it != denseByBlock.end())
        reduceOver(block, it->second);
      // One node: each rank's shards are its own, like its experts.
      if (auto it = headShardsByBlock.find(block);
          it != headShardsByBlock.end() &&
          !nontrivialAxes(groups[it->second.front()].reduce,
                          grid->getShape())
               .empty())
        reduceOver(block, it->second);
    }

    SmallVector<ParamUpdate> toUpdate;
    for (auto [arg, grad] : updates) {
      Value g = reduced.lookup(arg);
      toUpdate.push_back({arg, g ? g : grad, groups[arg].distinct});
    }
    FailureOr<SmallVector<Value>> updated =
        emitOptimizerUpdates(func, builder, model, config(), toUpdate);
    if (failed(updated))
      return failure();
    SmallVector<Value> results{loss};
    results.append(*updated);
    SmallVector<Type> resultTypes;
    for (Value v : results)
      resultTypes.push_back(v.getType());
    ret->setOperands(results);
    func.setType(FunctionType::get(ctx, func.getArgumentTypes(), resultTypes));
    return success();
  }

  OptimizerConfig config() const {
    OptimizerConfig c;
    c.optimizer = optimizer;
    c.lr = learningRate;
    c.momentum = momentum;
    c.beta1 = beta1;
    c.beta2 = beta2;
    c.eps = eps;
    c.weightDecay = weightDecay;
    c.clipNorm = clipNorm;
    c.schedule = lrSchedule;
    c.warmup = warmup;
    c.totalSteps = totalSteps;
    c.minLr = minLr;
    return c;
  }

  void runOnOperation() override {
    if (failed(verifyOptimizerConfig(config(), getOperation().getLoc())))
      return signalPassFailure();
    auto models = functionsWith(getOperation(), MoeDialect::getModelAttrName(),
                                "moe-build-train-step",
                                "no function carries a #moe.model");
    if (failed(models))
      return signalPassFailure();
    for (FunctionOpInterface func : *models)
      if (failed(buildStep(func, func->getAttrOfType<ModelAttr>(
                                     MoeDialect::getModelAttrName()))))
        return signalPassFailure();
  }
};
} // namespace
