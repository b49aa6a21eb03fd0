//===- MoeOps.h - moe dialect operations ------------------------*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_MOEOPS_H
#define MOE_DIALECT_MOE_MOEOPS_H

#include "moe/Dialect/Moe/MoeAttrs.h"
#include "moe/Dialect/Moe/MoeDialect.h"
#include "moe/Dialect/Moe/MoeTypes.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <optional>

#include "moe/Dialect/Moe/MoeInterfaces.h.inc"

namespace mlir::moe {
/// Marks a host planner (MoeInterfaces.td, docs/host-planners.md).
template <typename ConcreteType>
class HostPlanner : public OpTrait::TraitBase<ConcreteType, HostPlanner> {};
} // namespace mlir::moe

#define GET_OP_CLASSES
#include "moe/Dialect/Moe/MoeOps.h.inc"

namespace mlir::moe {

/// The `shard.grid` that `grid` names, seen from `from`, or an error on
/// `from` if there is none.
FailureOr<shard::GridOp> lookupGrid(Operation *from, FlatSymbolRefAttr grid,
                                    SymbolTableCollection &symbolTable);

/// The number of ranks in the group spanned by `axes` of `grid`: the product
/// of the grid's sizes along them. Emits an error on `from` if an axis is out
/// of range, repeated, or has a dynamic size.
FailureOr<int64_t> verifyGroupSize(Operation *from, shard::GridOp grid,
                                   ArrayRef<int16_t> axes);

/// The group size of a collective (its grid and axes; at least one axis),
/// or failure with the error already emitted on the op.
FailureOr<int64_t> collectiveGroupSize(CollectiveOpInterface op,
                                       SymbolTableCollection &table);

/// The group of a collective on `grid` spanning `axes`, read as the
/// routing trace's grid: nodes (grid axis 0, when the group spans it and
/// the grid has more than one axis) x ranks per node (the product of its
/// other axes).
std::pair<int64_t, int64_t> nodeGridOf(Operation *from, FlatSymbolRefAttr grid,
                                       ArrayRef<int16_t> axes);

/// C = ceil(f * k * tokens / experts): FlowMoE's capacity per expert per
/// rank (§2.2), FSMoE's T (§3.3). Exact for decimal f such as 1.1.
int64_t expertCapacity(double capacityFactor, int64_t topK, int64_t tokens,
                       int64_t experts);

/// What a routing all-to-all (moe.dispatch or moe.combine) moves: its
/// expert count and capacity (none: dropless), and the capacity slots it
/// moves, [firstSlot, firstSlot + slotCount): a token chunk's `slots`
/// window, or all of them (slotCount = capacity).
struct RoutingShape {
  int64_t experts = 0;
  std::optional<int64_t> capacity;
  int64_t firstSlot = 0;
  std::optional<int64_t> slotCount;
  /// Variable-count token chunk `part` of `parts` (`part [j, r]`): moves
  /// about 1/parts of the routed rows.
  int64_t part = 0, parts = 1;
  bool isWindow() const { return slotCount != capacity; }
};

/// The routing shape of a moe.dispatch or moe.combine; std::nullopt for
/// any other op.
std::optional<RoutingShape> routingShape(Operation *op);

/// Whether `op` occupies a communication stream: moe collectives, their
/// vjps, and upstream `shard` collectives.
bool isCommunicationTask(Operation *op);
/// Whether `op` is a host planner: it runs on a `#moe.stream<host>`.
inline bool isHostPlanner(Operation *op) {
  return op->hasTrait<HostPlanner>();
}

/// Verifies a `#moe.model` attribute against the body of `funcOp`.
LogicalResult verifyModel(Operation *funcOp, ModelAttr model);

} // namespace mlir::moe
#endif // MOE_DIALECT_MOE_MOEOPS_H
