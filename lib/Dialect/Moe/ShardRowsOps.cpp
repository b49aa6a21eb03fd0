//===- ShardRowsOps.cpp - moe.gather_rows, moe.scatter_rows ---------------===//
//
// Expert sharding's collectives on the variable-count path (moe-expert-
// sharding on a moe-variable-dropless layer; docs/passes/moe-expert-
// sharding.md): an all-gather-v of each local expert's filled rows over a
// node and its adjoint, a reduce-scatter-v. Both keep the expert side's
// E_l x R x M type (R bounds the node's rows per expert as well as the
// rank's); the counts are E_l x G per rank and E_l x S·G gathered.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"

#include "ShapeDiagnostics.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

namespace {

ShapedType shapeOf(Value v) { return cast<ShapedType>(v.getType()); }

/// The expert side in and out (E_l x R x M, one type) and counts with one
/// row per local expert.
LogicalResult verifyRowsCollective(Operation *op, Value input, Value result,
                                   Value rows) {
  if (failed(verifyRank(op, "input", shapeOf(input), 3)) ||
      failed(verifyRank(op, "rows", shapeOf(rows), 2)))
    return failure();
  if (input.getType() != result.getType())
    return op->emitOpError() << "keeps the expert side's type " << input.getType()
                             << " (R bounds the node's rows too), got "
                             << result.getType();
  return verifyDim(op, "rows", shapeOf(rows), 0,
                   shapeOf(input).getDimSize(0), "local experts E_l");
}

} // namespace

LogicalResult GatherRowsOp::verify() {
  if (failed(verifyRowsCollective(*this, getInput(), getResult(), getRows())) ||
      failed(verifyRank(*this, "gathered_rows", shapeOf(getGatheredRows()), 2)))
    return failure();
  if (getRows().getType().getElementType() !=
      getGatheredRows().getType().getElementType())
    return emitOpError() << "'gathered_rows' must have the element type of "
                            "'rows'";
  return verifyDim(*this, "gathered_rows", shapeOf(getGatheredRows()), 0,
                   shapeOf(getInput()).getDimSize(0), "local experts E_l");
}

LogicalResult GatherRowsOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> group = collectiveGroupSize(*this, table);
  if (failed(group))
    return failure();
  int64_t g = shapeOf(getRows()).getDimSize(1);
  return verifyDim(*this, "gathered_rows", shapeOf(getGatheredRows()), 1,
                   ShapedType::isDynamic(g) ? g : g * *group,
                   "the group's S ranks x the rows' G columns");
}

LogicalResult ScatterRowsOp::verify() {
  return verifyRowsCollective(*this, getInput(), getResult(), getRows());
}

LogicalResult ScatterRowsOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> group = collectiveGroupSize(*this, table);
  if (failed(group))
    return failure();
  int64_t g = shapeOf(getRows()).getDimSize(1);
  if (!ShapedType::isDynamic(g) && g % *group)
    return emitOpError() << "'rows' must be gathered counts: "
                         << g << " columns do not divide over the group's "
                         << *group << " ranks";
  return success();
}

bool GatherRowsOp::isCommunication() { return true; }
bool ScatterRowsOp::isCommunication() { return true; }
