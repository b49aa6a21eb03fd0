//===- OptimizerUpdates.cpp - the update tasks of a training step ---------===//
//
// Optimizer state is step state: each slot (torch.optim's exp_avg,
// exp_avg_sq, momentum_buffer) is a new argument of the step, marked
// `moe.state`, with the shape of its parameter on this rank — so it is
// replicated with dense weights and local with each rank's experts, with
// no extra rule — and the step returns its new value after the new
// parameters. The learning rate (and AdamW's update count) are step inputs
// the host fills from `moe.lr_schedule` before each step.
//
// Clipping (torch.nn.utils.clip_grad_norm_): the global norm is that of
// the whole model's gradient, each element counted once. Reduced
// replicated gradients are equal on every rank; an expert's gradient lives
// on one rank of the expert-parallel group; a shard (tensor-parallel heads,
// expert-sharding's hidden slices) on one rank of its node. So each group
// of parameters with the same `normAxes` sums its squares locally and
// all-reduces that one float over those axes (GradientGroups.h):
//   ||g||^2 = sum_sq(replicated) + sum over groups of
//             all_reduce_axes(sum_sq(group)),
// e.g. all_reduce_ep(sum_sq(experts)) + all_reduce_intra(sum_sq(heads)).
// A group's sum of squares depends only on its gradients: it runs on the
// compute stream while the dense all-reduce chunks are still in flight,
// and its one-float all-reduce goes on the communication stream (the
// runtime queues every all-reduce in one FIFO, so all ranks issue them in
// one order): what clipping adds after the last dense chunk is those
// 4-byte all-reduces, the local sum of the dense squares and the
// coefficient — the compute stream never blocks on a collective before
// the updates, which need the norm anyway.
//
//===----------------------------------------------------------------------===//

#include "OptimizerUpdates.h"

#include "moe/Analysis/Tasks.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace mlir::moe;

LogicalResult mlir::moe::verifyOptimizerConfig(const OptimizerConfig &c,
                                               Location loc) {
  auto bad = [&](StringRef what) {
    return mlir::emitError(loc) << "moe-build-train-step: " << what;
  };
  if (!(c.lr > 0))
    return bad("lr must be positive, got ") << c.lr;
  if (c.optimizer != "sgd" && c.optimizer != "adamw")
    return bad("unknown optimizer '") << c.optimizer
                                      << "' (expected sgd or adamw)";
  if (c.schedule != "constant" && c.schedule != "cosine")
    return bad("unknown lr-schedule '") << c.schedule
                                        << "' (expected constant or cosine)";
  if (!(c.momentum >= 0 && c.momentum < 1))
    return bad("momentum must be in [0, 1), got ") << c.momentum;
  if (c.optimizer == "adamw" && c.momentum != 0)
    return bad("momentum is an SGD option (AdamW has beta1)");
  if (!(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1))
    return bad("beta1 and beta2 must be in [0, 1), got ")
           << c.beta1 << ", " << c.beta2;
  if (!(c.eps > 0))
    return bad("eps must be positive, got ") << c.eps;
  if (!(c.weightDecay >= 0))
    return bad("weight-decay must be >= 0, got ") << c.weightDecay;
  if (!(c.clipNorm >= 0))
    return bad("clip-norm must be >= 0 (0: no clipping), got ") << c.clipNorm;
  if (c.schedule == "cosine" &&
      !(c.warmup >= 0 && c.totalSteps > c.warmup && c.minLr >= 0 &&
        c.minLr <= c.lr))
    return bad("lr-schedule=cosine needs 0 <= warmup < total-steps and "
               "0 <= min-lr <= lr, got warmup=")
           << c.warmup << " total-steps=" << c.totalSteps
           << " min-lr=" << c.minLr;
  return success();
}

namespace {

class UpdateEmitter {
public:
  UpdateEmitter(FunctionOpInterface func, OpBuilder &b, ModelAttr model,
                const OptimizerConfig &c)
      : func(func), b(b), model(model), c(c), ctx(func->getContext()),
        opt(TaskAttr::get(ctx, TaskKind::OPT, Phase::bwd, -1, 0, -1)) {}

  FailureOr<SmallVector<Value>> emit(ArrayRef<ParamUpdate> updates) {
    if (c.isPlainSgd())
      return plainSgd(updates);
    recordSchedule();
    Value lr = addArgument(scalar(b.getF32Type()),
                           MoeDialect::getStepInputAttrName(), "lr");
    Value step = c.optimizer == "adamw"
                     ? addArgument(scalar(b.getI64Type()),
                                   MoeDialect::getStepInputAttrName(), "step")
                     : Value();
    Value scale = c.clipNorm > 0 ? clipCoefficient(updates) : Value();
    SmallVector<Value> params, state;
    for (const ParamUpdate &u : updates) {
      std::string name = paramName(u.param);
      Type type = u.param.getType();
      Location loc = u.param.getLoc();
      if (c.optimizer == "adamw") {
        Value m = addArgument(type, MoeDialect::getStateAttrName(),
                              name + ".exp_avg");
        Value v = addArgument(type, MoeDialect::getStateAttrName(),
                              name + ".exp_avg_sq");
        auto op = AdamWOp::create(b, loc, type, type, type, u.param, u.grad,
                                  m, v, lr, step, scale,
                                  b.getF64FloatAttr(c.beta1),
                                  b.getF64FloatAttr(c.beta2),
                                  b.getF64FloatAttr(c.eps),
                                  b.getF64FloatAttr(c.weightDecay));
        setTask(op, opt);
        params.push_back(op.getNewParam());
        state.append({op.getNewExpAvg(), op.getNewExpAvgSq()});
      } else {
        Value buf = addArgument(type, MoeDialect::getStateAttrName(),
                                name + ".momentum_buffer");
        auto op = SgdMomentumOp::create(b, loc, type, type, u.param, u.grad,
                                        buf, lr, scale,
                                        b.getF64FloatAttr(c.momentum),
                                        b.getF64FloatAttr(c.weightDecay));
        setTask(op, opt);
        params.push_back(op.getNewParam());
        state.push_back(op.getNewBuffer());
      }
    }
    params.append(state);
    return params;
  }

private:
  SmallVector<Value> plainSgd(ArrayRef<ParamUpdate> updates) {
    SmallVector<Value> out;
    for (const ParamUpdate &u : updates) {
      auto sgd = SgdOp::create(b, u.param.getLoc(), u.param, u.grad,
                               b.getF64FloatAttr(c.lr));
      setTask(sgd, opt);
      out.push_back(sgd);
    }
    return out;
  }

  RankedTensorType scalar(Type element) {
    return RankedTensorType::get({}, element);
  }

  std::string paramName(BlockArgument arg) {
    auto name = func.getArgAttrOfType<StringAttr>(
        arg.getArgNumber(), MoeDialect::getParamAttrName());
    return name ? name.getValue().str()
                : "arg" + std::to_string(arg.getArgNumber());
  }

  /// A new last argument of the step with one string attribute.
  Value addArgument(Type type, StringRef attr, StringRef value) {
    unsigned index = func.getNumArguments();
    NamedAttribute named(StringAttr::get(ctx, attr), b.getStringAttr(value));
    (void)func.insertArgument(index, type, DictionaryAttr::get(ctx, named),
                              func.getLoc());
    return func.getArgument(index);
  }

  void recordSchedule() {
    SmallVector<NamedAttribute> fields = {
        b.getNamedAttr("kind", b.getStringAttr(c.schedule)),
        b.getNamedAttr("lr", b.getF64FloatAttr(c.lr))};
    if (c.schedule == "cosine")
      fields.append({b.getNamedAttr("warmup", b.getI64IntegerAttr(c.warmup)),
                     b.getNamedAttr("total", b.getI64IntegerAttr(c.totalSteps)),
                     b.getNamedAttr("min_lr", b.getF64FloatAttr(c.minLr))});
    func->setAttr(MoeDialect::getLrScheduleAttrName(),
                  b.getDictionaryAttr(fields));
  }

  Value sumSquares(ArrayRef<Value> grads) {
    auto op = SumSquaresOp::create(b, func.getLoc(), scalar(b.getF32Type()),
                                   grads);
    setTask(op, opt);
    return op;
  }

  /// min(1, clip / ||g||): the replicated gradients' squares summed
  /// here, every other group's also over the ranks holding its parts.
  Value clipCoefficient(ArrayRef<ParamUpdate> updates) {
    // Groups in order of first appearance; the replicated one last.
    SmallVector<std::pair<ArrayRef<int16_t>, SmallVector<Value>>> byAxes;
    SmallVector<Value> local;
    for (const ParamUpdate &u : updates) {
      if (u.normAxes.empty()) {
        local.push_back(u.grad);
        continue;
      }
      auto it = llvm::find_if(byAxes, [&](const auto &g) {
        return g.first == ArrayRef<int16_t>(u.normAxes);
      });
      if (it == byAxes.end())
        byAxes.push_back({u.normAxes, {u.grad}});
      else
        it->second.push_back(u.grad);
    }
    Value total;
    auto add = [&](Value v) {
      if (total) {
        auto sum = arith::AddFOp::create(b, func.getLoc(), total, v);
        setTask(sum, opt);
        v = sum;
      }
      total = v;
    };
    for (auto &[axes, grads] : byAxes) {
      auto reduce = AllReduceOp::create(
          b, func.getLoc(), ValueRange{sumSquares(grads)}, model.getGrid(),
          b.getDenseI16ArrayAttr(axes), /*bytes=*/nullptr);
      setTask(reduce, opt);
      add(reduce.getResult(0));
    }
    if (!local.empty())
      add(sumSquares(local));
    auto coef = ClipCoefOp::create(b, func.getLoc(), total,
                                   b.getF64FloatAttr(c.clipNorm));
    setTask(coef, opt);
    return coef;
  }

  FunctionOpInterface func;
  OpBuilder &b;
  ModelAttr model;
  const OptimizerConfig &c;
  MLIRContext *ctx;
  TaskAttr opt;
};

} // namespace

FailureOr<SmallVector<Value>> mlir::moe::emitOptimizerUpdates(
    FunctionOpInterface func, OpBuilder &builder, ModelAttr model,
    const OptimizerConfig &config, ArrayRef<ParamUpdate> updates) {
  return UpdateEmitter(func, builder, model, config).emit(updates);
}
