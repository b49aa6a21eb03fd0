//===- RoutingStatsOps.cpp - moe.routing_counts ---------------------------===//
//
// The routing statistics op (docs/load-aware.md §1): its shape rules and
// the group read as the routing trace's nodes x ranks-per-node grid.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"

#include "ShapeDiagnostics.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

LogicalResult mlir::moe::detail::verifyCountsShape(Operation *op,
                                                   Value indicesValue,
                                                   Value resultValue,
                                                   int64_t experts,
                                                   StringRef rows) {
  auto indices = cast<ShapedType>(indicesValue.getType());
  auto result = cast<ShapedType>(resultValue.getType());
  if (indices.getRank() != 3 || result.getRank() != 2)
    return op->emitOpError() << "counts token-choice routing: indices B x N x "
                                "k and a "
                             << rows << " x experts result, got "
                             << formatShape(indices.getShape()) << " and "
                             << formatShape(result.getShape());
  return verifyDim(op, "result", result, 1, experts, "experts E");
}

FailureOr<int64_t>
mlir::moe::detail::verifyCountsGroup(Operation *op, int64_t experts,
                                     SymbolTableCollection &table) {
  FailureOr<int64_t> size =
      collectiveGroupSize(cast<CollectiveOpInterface>(op), table);
  if (failed(size))
    return failure();
  if (experts % *size != 0)
    return op->emitOpError() << experts << " experts cannot be spread "
                             << "evenly over a group of " << *size << " ranks";
  return size;
}

LogicalResult RoutingCountsOp::verify() {
  return verifyCountsShape(*this, getIndices(), getResult(), getNumExperts(),
                           "samples");
}

LogicalResult
RoutingCountsOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> size = verifyCountsGroup(*this, getNumExperts(), table);
  if (failed(size))
    return failure();
  auto indices = cast<ShapedType>(getIndices().getType());
  int64_t samples = indices.getDimSize(0);
  return verifyDim(*this, "result", cast<ShapedType>(getResult().getType()),
                   0,
                   ShapedType::isDynamic(samples) ? samples : samples * *size,
                   "group size x samples per rank");
}

std::pair<int64_t, int64_t> mlir::moe::nodeGridOf(Operation *from,
                                                  FlatSymbolRefAttr gridRef,
                                                  ArrayRef<int16_t> axes) {
  SymbolTableCollection table;
  auto grid = table.lookupNearestSymbolFrom<shard::GridOp>(from, gridRef);
  ArrayRef<int64_t> shape = grid.getShape();
  int64_t nodes = 1, perNode = 1;
  for (int16_t axis : axes) {
    if (axis == 0 && shape.size() >= 2)
      nodes = shape[0];
    else
      perNode *= shape[axis];
  }
  return {nodes, perNode};
}

std::pair<int64_t, int64_t> RoutingCountsOp::getNodeGrid() {
  return nodeGridOf(*this, getGridAttr(), getAxes());
}

bool RoutingCountsOp::isCommunication() { return true; }
