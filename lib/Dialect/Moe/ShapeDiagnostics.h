//===- ShapeDiagnostics.h - shape checks with readable errors ---*- C++ -*-===//
//
// Verifier helpers shared by the moe ops: every check names the operand and
// prints shapes as `4x64x128` so that a user can see which dimension is off.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_DIALECT_MOE_SHAPEDIAGNOSTICS_H
#define MOE_LIB_DIALECT_MOE_SHAPEDIAGNOSTICS_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/SymbolTable.h"
#include <string>

namespace mlir::moe {
class DispatchOp;
} // namespace mlir::moe

namespace mlir::moe::detail {

/// "4x?x128" for a shape.
std::string formatShape(ArrayRef<int64_t> shape);

/// Emits "'<name>' must have rank <rank>, got <shape>" unless `type` has it.
LogicalResult verifyRank(Operation *op, StringRef name, ShapedType type,
                         int64_t rank);

/// Checks one dimension; a dynamic size on either side is accepted, since
/// dropless routing and shape-only imports leave sizes open.
LogicalResult verifyDim(Operation *op, StringRef name, ShapedType type,
                        unsigned dim, int64_t expected, StringRef meaning);

/// Checks a whole shape, position by position, with verifyDim's rules.
LogicalResult verifyShape(Operation *op, StringRef name, ShapedType type,
                          ArrayRef<int64_t> expected);

inline bool sameOrDynamic(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

/// A dispatch's `all_counts` (CountsExchangeOps.cpp): variable-count, G x E,
/// and, where its producer is visible, a moe.exchange_counts of the
/// dispatch's own indices and group.
LogicalResult verifyAllCounts(DispatchOp op, int64_t groupSize);

/// moe.routing_counts and moe.exchange_counts (RoutingStatsOps.cpp): indices
/// B x N x k and a `rows` x E result, `rows` saying what the rows are.
LogicalResult verifyCountsShape(Operation *op, Value indices, Value result,
                                int64_t experts, StringRef rows);

/// Their group size (grid and axes), the experts spread evenly over it; or
/// failure, reported on the op.
FailureOr<int64_t> verifyCountsGroup(Operation *op, int64_t experts,
                                     SymbolTableCollection &table);

/// Shortest decimal form that round-trips, always with a '.' or exponent.
std::string formatDouble(double value);

} // namespace mlir::moe::detail

#endif // MOE_LIB_DIALECT_MOE_SHAPEDIAGNOSTICS_H
