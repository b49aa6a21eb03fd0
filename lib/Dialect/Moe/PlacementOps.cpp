//===- PlacementOps.cpp - moe.plan_placement, moe.move_samples ------------===//
//
// NetMoE's placement as a run-time value (docs/netmoe-in-the-step.md): the
// planner op and the op that moves what follows a sample (labels). Their
// group and the routing trace's nodes x ranks-per-node reading of it are
// the routing statistics op's (RoutingStatsOps.cpp).
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"

#include "ShapeDiagnostics.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

namespace {

/// The group size of a placement op, or failure (reported).
FailureOr<int64_t> groupOf(Operation *op, FlatSymbolRefAttr gridRef,
                           ArrayRef<int16_t> axes,
                           SymbolTableCollection &table) {
  FailureOr<shard::GridOp> grid = lookupGrid(op, gridRef, table);
  if (failed(grid))
    return failure();
  if (axes.empty())
    return op->emitOpError() << "needs at least one grid axis for its group";
  return verifyGroupSize(op, *grid, axes);
}

} // namespace

LogicalResult PlanPlacementOp::verify() {
  auto counts = cast<ShapedType>(getCounts().getType());
  auto result = cast<ShapedType>(getResult().getType());
  if (counts.getRank() != 2 || result.getRank() != 1)
    return emitOpError() << "needs samples x experts counts and a samples "
                            "result, got "
                         << formatShape(counts.getShape()) << " and "
                         << formatShape(result.getShape());
  if (failed(verifyDim(*this, "counts", counts, 1, getNumExperts(),
                       "experts E")))
    return failure();
  return verifyDim(*this, "result", result, 0, counts.getDimSize(0),
                   "samples (the counts' rows)");
}

LogicalResult
PlanPlacementOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> size = groupOf(*this, getGridAttr(), getAxes(), table);
  if (failed(size))
    return failure();
  if (getNumExperts() % *size != 0)
    return emitOpError() << getNumExperts() << " experts cannot be spread "
                         << "evenly over a group of " << *size << " ranks";
  int64_t samples = cast<ShapedType>(getCounts().getType()).getDimSize(0);
  if (!ShapedType::isDynamic(samples) && samples % *size != 0)
    return emitOpError() << samples << " samples cannot be placed evenly on "
                         << *size << " ranks";
  return success();
}

// A host planner: it occupies a host thread, not a link.
bool PlanPlacementOp::isCommunication() { return false; }

LogicalResult MoveSamplesOp::verify() {
  auto input = cast<ShapedType>(getInput().getType());
  if (input.getRank() < 1)
    return emitOpError() << "needs a batch dimension to move samples along";
  if (getResult().getType() != getInput().getType())
    return emitOpError() << "result type must equal the input type";
  return verifyRank(*this, "placement",
                    cast<ShapedType>(getPlacement().getType()), 1);
}

LogicalResult MoveSamplesOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> size = groupOf(*this, getGridAttr(), getAxes(), table);
  if (failed(size))
    return failure();
  int64_t samples = cast<ShapedType>(getInput().getType()).getDimSize(0);
  if (ShapedType::isDynamic(samples))
    return success();
  return verifyDim(*this, "placement",
                   cast<ShapedType>(getPlacement().getType()), 0,
                   samples * *size, "group size x samples per rank");
}

bool MoveSamplesOp::isCommunication() { return true; }
