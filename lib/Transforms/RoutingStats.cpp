//===- RoutingStats.cpp - moe.routing_counts after every dispatch ---------===//
//
// Routing statistics in the step (docs/load-aware.md §1). The counts op
// goes right after the forward dispatch, on its communication stream: it
// reads the dispatch's indices, which the dispatch already waited for, so
// no event is needed and the all-to-all is not delayed by the gather.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEROUTINGSTATS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// Whether the counts of `dispatch`'s indices are already gathered (by this
/// pass, or for NetMoE's planner).
bool hasCounts(DispatchOp dispatch) {
  return llvm::any_of(dispatch.getIndices().getUsers(),
                      [](Operation *user) { return isa<RoutingCountsOp>(user); });
}

LogicalResult addCounts(DispatchOp dispatch, SymbolTableCollection &table) {
  auto indices = cast<RankedTensorType>(dispatch.getIndices().getType());
  if (indices.getRank() != 3 || hasCounts(dispatch))
    return success(); // expert choice (E x C) has no per-sample rows
  FailureOr<shard::GridOp> grid =
      lookupGrid(dispatch, dispatch.getGridAttr(), table);
  if (failed(grid))
    return failure();
  FailureOr<int64_t> group =
      verifyGroupSize(dispatch, *grid, dispatch.getAxes());
  if (failed(group))
    return failure();
  if (!indices.hasStaticShape())
    return dispatch.emitOpError()
           << "routing statistics need static routing shapes";
  OpBuilder b(dispatch->getContext());
  b.setInsertionPointAfter(dispatch);
  auto type = RankedTensorType::get(
      {*group * indices.getDimSize(0),
       static_cast<int64_t>(dispatch.getNumExperts())},
      indices.getElementType());
  auto counts = RoutingCountsOp::create(
      b, dispatch.getLoc(), type, dispatch.getIndices(),
      dispatch.getGridAttr(), dispatch.getAxesAttr(),
      dispatch.getNumExpertsAttr());
  // The dispatch's stream and task (FlowMoE's D_r^l): the simulator and
  // the schedule printer see one communication task per dispatch.
  for (StringRef name : {MoeDialect::getStreamAttrName(),
                         MoeDialect::getTaskAttrName()})
    if (Attribute a = dispatch->getAttr(name))
      counts->setAttr(name, a);
  return success();
}

struct RoutingStatsPass
    : public moe::impl::MoeRoutingStatsBase<RoutingStatsPass> {
  void runOnOperation() override {
    auto steps = functionsWith(
        getOperation(), MoeDialect::getScheduleAttrName(),
        "moe-routing-stats",
        "no scheduled step (a function with moe.schedule; run moe-schedule "
        "first)");
    if (failed(steps))
      return signalPassFailure();
    SymbolTableCollection table;
    for (FunctionOpInterface func : *steps) {
      SmallVector<DispatchOp> dispatches;
      for (Operation &op : func.getFunctionBody().front())
        if (auto d = dyn_cast<DispatchOp>(op))
          dispatches.push_back(d);
      for (DispatchOp d : dispatches)
        if (failed(addCounts(d, table)))
          return signalPassFailure();
    }
  }
};

} // namespace
