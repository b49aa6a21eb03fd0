//===- ExpertSharding.cpp - FSMoE's expert-sharding parallelism (ESP) -----===//
//
// FSMoE §2.2 / Fig. 2 on the forward model, before moe-microbatch: each
// expert's hidden dimension H is sharded over the ranks of a node (the
// model's intra_axes), and the experts over the nodes (the rest of the
// expert-parallel axes). Per MoE layer:
//
//   dispatch (over the nodes) -> shard.all_gather (the node's tokens, along
//   the slots) -> experts on an H/S shard (partial sums) ->
//   shard.reduce_scatter (sum, back to each rank's slots) -> combine
//
// A variable-count (dropless) layer, after moe-variable-dropless, the same
// with moe.gather_rows / moe.scatter_rows (all-gather-v, reduce-scatter-v
// of each local expert's filled rows, lib/Dialect/Moe/ShardRowsOps.cpp).
//
// The expert weights become the rank's shard (moe.hidden_shard = [dim,
// S]); the model's ep_axes become the nodes'. moe-build-train-step makes
// each collective the other's adjoint. docs/passes/moe-expert-sharding.md.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEEXPERTSHARDING
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// The sharding of one model: S ranks per node share each expert, N nodes
/// hold E / N experts each.
struct Sharding {
  FlatSymbolRefAttr grid;
  SmallVector<int16_t> intraAxes, interAxes;
  int64_t shards = 1, nodes = 1;
};

struct ExpertShardingPass
    : public moe::impl::MoeExpertShardingBase<ExpertShardingPass> {
  using MoeExpertShardingBase::MoeExpertShardingBase;

  FailureOr<Sharding> shardingOf(FunctionOpInterface func, ModelAttr model) {
    Sharding s;
    s.grid = model.getGrid();
    SymbolTableCollection table;
    FailureOr<shard::GridOp> grid = lookupGrid(func, s.grid, table);
    if (failed(grid))
      return failure();
    ArrayRef<int64_t> shape = grid->getShape();
    s.intraAxes.assign(model.getIntraAxes().begin(), model.getIntraAxes().end());
    for (int16_t a : s.intraAxes)
      s.shards *= shape[a];
    for (int16_t a : model.getEpAxes())
      if (!llvm::is_contained(s.intraAxes, a)) {
        s.interAxes.push_back(a);
        s.nodes *= shape[a];
      }
    if (s.intraAxes.empty() || s.shards == 1)
      return mlir::emitError(func.getLoc())
             << "moe-expert-sharding: the model's intra_axes ["
             << model.getIntraAxes() << "] span one rank; nothing to shard";
    // A node's ranks hold consecutive experts in the plain step (its
    // experts are what the node's ranks held): the intra axes are the
    // expert-parallel group's last.
    ArrayRef<int16_t> ep = model.getEpAxes();
    if (ep.size() < s.intraAxes.size() ||
        ep.take_back(s.intraAxes.size()) != ArrayRef<int16_t>(s.intraAxes))
      return mlir::emitError(func.getLoc())
             << "moe-expert-sharding: the intra axes [" << model.getIntraAxes()
             << "] must be the last expert-parallel axes (ep_axes [" << ep
             << "])";
    if (model.getHidden() % s.shards || model.getExperts() % s.nodes)
      return mlir::emitError(func.getLoc())
             << "moe-expert-sharding: H = " << model.getHidden()
             << " must divide over " << s.shards << " ranks per node and E = "
             << model.getExperts() << " over " << s.nodes << " nodes";
    return s;
  }

  /// Makes weight `w` of `expert` the rank's shard along `dim`.
  LogicalResult shardWeight(FunctionOpInterface func, ExpertOp expert, Value w,
                            unsigned dim, const Sharding &s,
                            int64_t localExperts) {
    // After moe-microbatch (the variable-count path) the micro-batches'
    // copies of a layer share its weights: sharded once, by the first.
    auto arg = dyn_cast<BlockArgument>(w);
    if (!arg || arg.getOwner() != &func.getFunctionBody().front() ||
        !llvm::all_of(arg.getUsers(),
                      [&](Operation *u) {
                        auto e = dyn_cast<ExpertOp>(u);
                        return e && e.getUp() == expert.getUp() &&
                               e.getDown() == expert.getDown() &&
                               e.getGateProj() == expert.getGateProj();
                      }))
      return expert.emitOpError()
             << "moe-expert-sharding: every expert weight must be a "
                "parameter of the model used by this layer only";
    if (func.getArgAttr(arg.getArgNumber(),
                        MoeDialect::getHiddenShardAttrName()))
      return success();
    auto type = cast<RankedTensorType>(arg.getType());
    RankedTensorType sharded =
        withDim(withDim(type, dim, type.getDimSize(dim) / s.shards), 0,
                localExperts);
    arg.setType(sharded);
    func.setArgAttr(arg.getArgNumber(), MoeDialect::getHiddenShardAttrName(),
                    DenseI64ArrayAttr::get(func->getContext(),
                                           {int64_t(dim), s.shards}));
    return success();
  }

  LogicalResult shardLayer(FunctionOpInterface func, DispatchOp dispatch,
                           const Sharding &s, ModelAttr model) {
    auto fail = [&](const Twine &why) {
      return dispatch.emitOpError() << "moe-expert-sharding: " << why;
    };
    if (dispatch.getSlots() || dispatch.getPart() ||
        (!dispatch.getCapacity() && !dispatch.isVariable()))
      return fail("shards capacity-routed or variable-count layers not yet "
                  "chunked (run it before moe-token-pipeline, and on a "
                  "dropless model after moe-variable-dropless)");
    if (dispatch.getAxes() != model.getEpAxes())
      return fail("dispatches outside the model's expert-parallel group");
    if (!dispatch.getResult().hasOneUse())
      return fail("its tokens feed more than the experts");
    auto expert = dyn_cast<ExpertOp>(*dispatch.getResult().getUsers().begin());
    if (!expert || expert.getRows() != dispatch.getRows() ||
        !expert.getResult().hasOneUse())
      return fail("needs dispatch -> moe.expert -> moe.combine");
    auto combine = dyn_cast<CombineOp>(*expert.getResult().getUsers().begin());
    if (!combine || combine.getPlacement() || combine.getResidual() ||
        combine.getRows() != dispatch.getRows())
      return fail("needs dispatch -> moe.expert -> moe.combine");
    if (dispatch.isVariable())
      return shardVariableLayer(func, dispatch, expert, combine, s, model);

    // Slots per rank of the plain layout: G·C for G expert-parallel ranks.
    auto plain = cast<RankedTensorType>(dispatch.getResult().getType());
    int64_t group = s.nodes * s.shards;
    int64_t capacitySlots = plain.getDimSize(1) / group;
    int64_t localExperts = model.getExperts() / s.nodes;
    MLIRContext *ctx = func->getContext();
    auto inter = DenseI16ArrayAttr::get(ctx, s.interAxes);
    auto intra = DenseI16ArrayAttr::get(ctx, s.intraAxes);

    RankedTensorType received = withDim(
        withDim(plain, 0, localExperts), 1, s.nodes * capacitySlots);
    RankedTensorType gathered =
        withDim(received, 1, s.shards * s.nodes * capacitySlots);
    dispatch.setAxesAttr(inter);
    dispatch.getResult().setType(received);
    combine.setAxesAttr(inter);

    OpBuilder b(expert);
    IntegerAttr slotAxis = b.getIndexAttr(1);
    auto gather = shard::AllGatherOp::create(b, expert.getLoc(), gathered,
                                             s.grid, intra,
                                             dispatch.getResult(), slotAxis);
    expert.getInputMutable().assign(gather.getResult());
    expert.getResult().setType(gathered);
    b.setInsertionPointAfter(expert);
    auto scatter = shard::ReduceScatterOp::create(
        b, expert.getLoc(), received, s.grid, intra, expert.getResult(),
        shard::ReductionKindAttr::get(ctx, shard::ReductionKind::Sum),
        slotAxis);
    combine.getInputMutable().assign(scatter.getResult());
    return shardWeights(func, expert, s, localExperts);
  }

  /// The variable-count layer (moe-variable-dropless): the dispatch's
  /// rows over the nodes, all-gathered with their counts over the node
  /// (moe.gather_rows), the experts over the node's rows, the partial sums
  /// reduce-scattered back to each rank's run (moe.scatter_rows). Every
  /// expert-side buffer keeps the dispatch's E_l x R x M type: the bound R
  /// (G T by default, G the plain group) holds the node's rows too.
  LogicalResult shardVariableLayer(FunctionOpInterface func,
                                   DispatchOp dispatch, ExpertOp expert,
                                   CombineOp combine, const Sharding &s,
                                   ModelAttr model) {
    if (dispatch.getExpertSlots())
      return dispatch.emitOpError()
             << "moe-expert-sharding: an expert placement (expert_slots) "
                "is not sharded";
    MLIRContext *ctx = func->getContext();
    int64_t localExperts = model.getExperts() / s.nodes;
    auto expertSide = withDim(
        cast<RankedTensorType>(dispatch.getResult().getType()), 0,
        localExperts);
    auto rowsType = cast<RankedTensorType>(dispatch.getRows().getType());
    auto nodeRows = RankedTensorType::get({localExperts, s.nodes},
                                          rowsType.getElementType());
    auto gatheredRows = withDim(nodeRows, 1, s.shards * s.nodes);
    auto inter = DenseI16ArrayAttr::get(ctx, s.interAxes);
    auto intra = DenseI16ArrayAttr::get(ctx, s.intraAxes);
    dispatch.setAxesAttr(inter);
    dispatch.getResult().setType(expertSide);
    dispatch.getRows().setType(nodeRows);
    combine.setAxesAttr(inter);

    OpBuilder b(expert);
    auto gather = GatherRowsOp::create(b, expert.getLoc(), expertSide,
                                       gatheredRows, dispatch.getResult(),
                                       dispatch.getRows(), s.grid, intra);
    expert.getInputMutable().assign(gather.getResult());
    expert.getRowsMutable().assign(gather.getGatheredRows());
    expert.getResult().setType(expertSide);
    b.setInsertionPointAfter(expert);
    auto scatter = ScatterRowsOp::create(b, expert.getLoc(), expertSide,
                                         expert.getResult(),
                                         gather.getGatheredRows(), s.grid,
                                         intra);
    combine.getInputMutable().assign(scatter.getResult());
    return shardWeights(func, expert, s, localExperts);
  }

  /// up, gate: E x M x H (shard H, dim 2); down: E x H x M (dim 1).
  LogicalResult shardWeights(FunctionOpInterface func, ExpertOp expert,
                             const Sharding &s, int64_t localExperts) {
    if (failed(shardWeight(func, expert, expert.getUp(), 2, s, localExperts)) ||
        failed(shardWeight(func, expert, expert.getDown(), 1, s,
                           localExperts)))
      return failure();
    if (Value g = expert.getGateProj())
      if (failed(shardWeight(func, expert, g, 2, s, localExperts)))
        return failure();
    return success();
  }

  /// Whether this run shards `model` (option `routing`): a dropless model
  /// once moe-variable-dropless has made it variable-count, a
  /// capacity-routed one before.
  FailureOr<bool> wanted(FunctionOpInterface func, ModelAttr model) {
    if (routing != "any" && routing != "capacity" && routing != "variable")
      return mlir::emitError(func.getLoc())
             << "moe-expert-sharding: routing must be any, capacity or "
                "variable, got '"
             << routing << "'";
    if (!model.isDropless())
      return routing != "variable";
    if (routing == "capacity")
      return false;
    bool variable = false;
    func->walk([&](DispatchOp d) { variable |= d.isVariable(); });
    if (!variable)
      return mlir::emitError(func.getLoc())
             << "moe-expert-sharding: the model is dropless: run "
                "moe-variable-dropless first (its variable-count layers are "
                "sharded with moe.gather_rows / moe.scatter_rows), or bound "
                "it with moe-bound-dropless";
    return true;
  }

  LogicalResult shardModel(FunctionOpInterface func, ModelAttr model) {
    FailureOr<bool> shard = wanted(func, model);
    if (failed(shard) || !*shard)
      return failure(failed(shard));
    FailureOr<Sharding> s = shardingOf(func, model);
    if (failed(s))
      return failure();
    SmallVector<DispatchOp> dispatches;
    func->walk([&](DispatchOp d) { dispatches.push_back(d); });
    if (dispatches.empty())
      return mlir::emitError(func.getLoc())
             << "moe-expert-sharding: the model has no MoE layer";
    for (DispatchOp d : dispatches)
      if (failed(shardLayer(func, d, *s, model)))
        return failure();
    // The expert-parallel group is now the nodes'.
    func->setAttr(MoeDialect::getModelAttrName(),
                  ModelAttr::get(func->getContext(), model.getLayers(),
                                 model.getBatch(), model.getSeq(),
                                 model.getEmbed(), model.getHidden(),
                                 model.getExperts(), model.getTopK(),
                                 model.getCapacityFactor(), model.getGrid(),
                                 s->interAxes, model.getDpAxes(),
                                 model.getIntraAxes()));
    refreshArgumentTypes(func);
    return success();
  }

  void runOnOperation() override {
    auto models = functionsWith(getOperation(), MoeDialect::getModelAttrName(),
                                "moe-expert-sharding",
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
