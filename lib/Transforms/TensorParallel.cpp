//===- TensorParallel.cpp - tensor-parallel attention (FSMoE's MP) --------===//
//
// Megatron's column/row split of attention over the ranks of a node (the
// model's intra_axes), in the sequence-parallel form FSMoE pairs with
// expert sharding (seeds/001 §2.2, N_MP = N_ESP). On the forward model,
// before moe-microbatch, every moe.attention
//
//   %a = moe.attention %x weights(%wq, %wk, %wv, %wo) heads = H ...
//
// becomes
//
//   %g = shard.all_gather %x  gather_axis = 0     // the node's S·B samples
//   %p = moe.attention %g weights(shards) heads = H/S kv_heads = K/S ...
//   %a = shard.reduce_scatter %p scatter_axis = 0 // summed, own B samples
//
// Between the collectives every rank holds the node's samples and runs
// its H/S query heads (K/S key/value heads: whole GQA groups); Wq, Wk, Wv
// (and their biases) are column shards by whole heads, Wo a row shard, so
// the rank's output is a partial sum over heads that the reduce-scatter
// completes; an out_bias moves after it (moe.bias_add), added once. Outside attention each rank keeps its own B samples, exactly
// as in the plain data-parallel step: the same data, the same loss.
// Sharded weights carry moe.head_shard = [dim, S]; moe-build-train-step
// differentiates each collective into the other and reduces their
// gradients over the nodes only. docs/passes/moe-tensor-parallel.md.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOETENSORPARALLEL
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

struct TensorParallelPass
    : public moe::impl::MoeTensorParallelBase<TensorParallelPass> {
  using MoeTensorParallelBase::MoeTensorParallelBase;

  /// Makes weight `w` of `attention` the rank's part along `dim` of S.
  LogicalResult shardWeight(FunctionOpInterface func, AttentionOp attention,
                            Value w, StringRef what, unsigned dim,
                            int64_t shards) {
    auto arg = dyn_cast<BlockArgument>(w);
    if (!arg || arg.getOwner() != &func.getFunctionBody().front() ||
        !llvm::hasSingleElement(arg.getUsers()))
      return attention.emitOpError()
             << "moe-tensor-parallel: its " << what
             << " must be a parameter of the model used by this attention "
                "only";
    auto type = cast<RankedTensorType>(arg.getType());
    arg.setType(withDim(type, dim, type.getDimSize(dim) / shards));
    func.setArgAttr(arg.getArgNumber(), MoeDialect::getHeadShardAttrName(),
                    DenseI64ArrayAttr::get(func->getContext(),
                                           {int64_t(dim), shards}));
    return success();
  }

  LogicalResult shardAttention(FunctionOpInterface func, AttentionOp attention,
                               FlatSymbolRefAttr grid,
                               ArrayRef<int16_t> intraAxes, int64_t shards) {
    auto fail = [&](const Twine &why) {
      return attention.emitOpError() << "moe-tensor-parallel: " << why;
    };
    if (attention.getInput().getDefiningOp<shard::AllGatherOp>())
      return fail("this attention is already tensor-parallel");
    int64_t heads = attention.getNumHeads(), kv = attention.getNumKvHeads();
    if (heads % shards || kv % shards)
      return fail("heads = " + Twine(heads) + " and kv_heads = " + Twine(kv) +
                  " must both divide over the " + Twine(shards) +
                  " ranks of a node (whole heads, whole GQA groups)");

    // Column shards by whole heads: wq M x (H·D), wk, wv M x (K·D) and the
    // Q, K, V biases; row shard of wo (H·D) x M.
    if (failed(shardWeight(func, attention, attention.getWq(), "wq", 1,
                           shards)) ||
        failed(shardWeight(func, attention, attention.getWk(), "wk", 1,
                           shards)) ||
        failed(shardWeight(func, attention, attention.getWv(), "wv", 1,
                           shards)) ||
        failed(shardWeight(func, attention, attention.getWo(), "wo", 0,
                           shards)))
      return failure();
    if (Value b = attention.getBq())
      if (failed(shardWeight(func, attention, b, "bq", 0, shards)) ||
          failed(shardWeight(func, attention, attention.getBk(), "bk", 0,
                             shards)) ||
          failed(shardWeight(func, attention, attention.getBv(), "bv", 0,
                             shards)))
        return failure();
    OpBuilder b(attention);
    attention.setNumHeads(heads / shards);
    attention.setNumKvHeads(kv / shards);

    // The node's samples (axis 0) in, partial sums of them out.
    auto local = cast<RankedTensorType>(attention.getInput().getType());
    RankedTensorType gathered =
        withDim(local, 0, local.getDimSize(0) * shards);
    MLIRContext *ctx = func->getContext();
    auto axes = DenseI16ArrayAttr::get(ctx, intraAxes);
    IntegerAttr sampleAxis = b.getIndexAttr(0);
    auto gather = shard::AllGatherOp::create(b, attention.getLoc(), gathered,
                                             grid, axes, attention.getInput(),
                                             sampleAxis);
    attention.getInputMutable().assign(gather.getResult());
    auto result = cast<RankedTensorType>(attention.getResult().getType());
    attention.getResult().setType(withDim(result, 0, gathered.getDimSize(0)));
    b.setInsertionPointAfter(attention);
    auto scatter = shard::ReduceScatterOp::create(
        b, attention.getLoc(), result, grid, axes, attention.getResult(),
        shard::ReductionKindAttr::get(ctx, shard::ReductionKind::Sum),
        sampleAxis);
    Value out = scatter.getResult();
    // The output bias is added once, to the summed output (Megatron's
    // row-parallel bias): inside the attention every rank would add it
    // before the sum. It stays a replicated weight; its gradient, the sum
    // of the rank's own output rows, is reduced with the others.
    if (Value bias = attention.getOutBias()) {
      out = BiasAddOp::create(b, attention.getLoc(), out.getType(), out, bias);
      attention.getOutBiasMutable().clear();
    }
    attention.getResult().replaceAllUsesExcept(out, scatter);
    return success();
  }

  LogicalResult shardModel(FunctionOpInterface func, ModelAttr model) {
    SymbolTableCollection table;
    FailureOr<shard::GridOp> grid = lookupGrid(func, model.getGrid(), table);
    if (failed(grid))
      return failure();
    int64_t shards = 1;
    for (int16_t a : model.getIntraAxes())
      shards *= grid->getShape()[a];
    if (shards == 1)
      return mlir::emitError(func.getLoc())
             << "moe-tensor-parallel: the model's intra_axes ["
             << model.getIntraAxes() << "] span one rank; nothing to shard";
    // Each rank of a node holds its own samples (the intra axes are
    // data-parallel), which the all-gather collects.
    for (int16_t a : model.getIntraAxes())
      if (!llvm::is_contained(model.getDpAxes(), a))
        return mlir::emitError(func.getLoc())
               << "moe-tensor-parallel: the intra axes ["
               << model.getIntraAxes() << "] must be data-parallel (dp_axes ["
               << model.getDpAxes() << "])";
    // NetMoE moves samples between ranks; its placement and tensor
    // parallelism's sample split have not been composed.
    if (func->walk([](PlanPlacementOp) { return WalkResult::interrupt(); })
            .wasInterrupted())
      return mlir::emitError(func.getLoc())
             << "moe-tensor-parallel: a NetMoE model (moe.plan_placement) "
                "is not supported";
    SmallVector<AttentionOp> attentions;
    func->walk([&](AttentionOp a) { attentions.push_back(a); });
    if (attentions.empty())
      return mlir::emitError(func.getLoc())
             << "moe-tensor-parallel: the model has no moe.attention";
    for (AttentionOp a : attentions)
      if (failed(shardAttention(func, a, model.getGrid(),
                                model.getIntraAxes(), shards)))
        return failure();
    refreshArgumentTypes(func);
    return success();
  }

  void runOnOperation() override {
    auto models = functionsWith(getOperation(), MoeDialect::getModelAttrName(),
                                "moe-tensor-parallel",
                                "no function carries a #moe.model");
    if (failed(models))
      return signalPassFailure();
    for (FunctionOpInterface func : *models)
      if (failed(shardModel(func, func->getAttrOfType<ModelAttr>(
                                      MoeDialect::getModelAttrName()))))
        return signalPassFailure();
  }
};
} // namespace
