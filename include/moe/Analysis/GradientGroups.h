//===- GradientGroups.h - which ranks share a parameter's gradient -*- C++ -*-===//
//
// One rule, used where gradients are reduced (moe-build-train-step), where
// the clipping norm is summed (OptimizerUpdates) and where a scheduled step
// is checked (the schedule verifier): per parameter, the grid axes whose
// ranks hold replicas of its gradient (summed by an all-reduce) and the
// axes whose ranks hold different parts of it (summed once each in the
// global norm).
//
//   replicated (attention, norms, gate, embeddings): reduce = dp_axes;
//   tensor-parallel head shard (moe.head_shard): a node's ranks hold
//     different heads, the nodes replicas: reduce = dp_axes \ intra_axes,
//     distinct = intra_axes;
//   expert weight: local to its rank: distinct = ep_axes, plus intra_axes
//     for an expert-sharding shard (moe.hidden_shard; ep_axes are then the
//     nodes').
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_GRADIENTGROUPS_H
#define MOE_ANALYSIS_GRADIENTGROUPS_H

#include "moe/Dialect/Moe/MoeOps.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir::moe {

struct GradientGroups {
  /// Axes over which ranks hold replicas of the gradient.
  SmallVector<int16_t> reduce;
  /// Axes over which ranks hold different parts of the parameter.
  SmallVector<int16_t> distinct;
  bool expert = false, headShard = false;
};

/// The groups of parameter `param` (an argument of `func`) of `model`.
GradientGroups gradientGroups(FunctionOpInterface func, ModelAttr model,
                              BlockArgument param);

/// `axes` without those of size 1 on `grid`, sorted: two groups are the
/// same set of ranks iff these are equal.
SmallVector<int16_t> nontrivialAxes(ArrayRef<int16_t> axes,
                                    ArrayRef<int64_t> gridShape);

} // namespace mlir::moe

#endif // MOE_ANALYSIS_GRADIENTGROUPS_H
