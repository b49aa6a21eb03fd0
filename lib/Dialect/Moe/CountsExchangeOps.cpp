//===- CountsExchangeOps.cpp - moe.exchange_counts and its readers --------===//
//
// One counts exchange per variable-count layer (docs/variable-dropless.md):
// the op's shape rules, and the rule for a dispatch that reads it
// (`all_counts`): the counts must be of that dispatch's own routing, since
// the sizes of its all-to-all-v follow from them.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"

#include "ShapeDiagnostics.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

LogicalResult ExchangeCountsOp::verify() {
  return verifyCountsShape(*this, getIndices(), getResult(), getNumExperts(),
                           "ranks");
}

LogicalResult
ExchangeCountsOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> size = verifyCountsGroup(*this, getNumExperts(), table);
  if (failed(size))
    return failure();
  return verifyDim(*this, "result", cast<ShapedType>(getResult().getType()),
                   0, *size, "group size G");
}

bool ExchangeCountsOp::isCommunication() { return true; }

LogicalResult mlir::moe::detail::verifyAllCounts(DispatchOp op,
                                                 int64_t groupSize) {
  Value counts = op.getAllCounts();
  if (!counts)
    return success();
  if (!op.isVariable())
    return op.emitOpError() << "'all_counts' needs variable-count routing "
                               "('rows' and a bound; moe-variable-dropless)";
  auto type = cast<ShapedType>(counts.getType());
  if (failed(verifyRank(op, "all_counts", type, 2)) ||
      failed(verifyDim(op, "all_counts", type, 0, groupSize,
                       "group size G")) ||
      failed(verifyDim(op, "all_counts", type, 1, op.getNumExperts(),
                       "experts E")))
    return failure();
  // Inside a vjp, counts and indices are the body's arguments: compare the
  // primals bound to them. Counts from elsewhere (a function argument) are
  // data: the runtime checks this rank's row against its routing.
  Value indices = op.getIndices();
  auto primal = [](Value v) -> Value {
    auto arg = dyn_cast<BlockArgument>(v);
    auto vjp = arg ? dyn_cast<VjpOp>(arg.getOwner()->getParentOp()) : nullptr;
    return vjp && arg.getArgNumber() < vjp.getPrimals().size()
               ? vjp.getPrimals()[arg.getArgNumber()]
               : v;
  };
  counts = primal(counts);
  indices = primal(indices);
  auto exchange = counts.getDefiningOp<ExchangeCountsOp>();
  if (!exchange)
    return success();
  if (exchange.getIndices() != indices ||
      exchange.getGridAttr() != op.getGridAttr() ||
      exchange.getAxes() != op.getAxes())
    return op.emitOpError()
           << "reads 'all_counts' exchanged for other routing: the "
              "moe.exchange_counts must count this dispatch's own indices "
              "over its group (the sizes of its all-to-all-v follow from "
              "them)";
  return success();
}
