//===- OptimizerUpdates.h - the update tasks of a training step -*- C++ -*-===//
//
// The last part of moe-build-train-step: one update per parameter — plain
// moe.sgd, or moe.adamw / moe.sgd_momentum with their state as explicit
// step state — and, with clip-norm, the global gradient norm that scales
// them. docs/optimizers.md.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_TRANSFORMS_OPTIMIZERUPDATES_H
#define MOE_LIB_TRANSFORMS_OPTIMIZERUPDATES_H

#include "moe/Dialect/Moe/MoeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include <string>

namespace mlir::moe {

/// moe-build-train-step's optimizer options.
struct OptimizerConfig {
  std::string optimizer = "sgd"; // sgd | adamw
  double lr = 0.01, momentum = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8,
         weightDecay = 0, clipNorm = 0, minLr = 0;
  std::string schedule = "constant"; // constant | cosine
  int64_t warmup = 0, totalSteps = 0;

  /// SGD at a constant rate without momentum, decay or clipping: the
  /// stateless moe.sgd with its rate as an attribute.
  bool isPlainSgd() const {
    return optimizer == "sgd" && momentum == 0 && weightDecay == 0 &&
           clipNorm == 0 && schedule == "constant";
  }
};

/// Checks the options; the message names the option at fault.
LogicalResult verifyOptimizerConfig(const OptimizerConfig &config,
                                    Location loc);

/// One parameter to update: its argument, its final gradient (all-reduced
/// for replicated weights) and the grid axes whose ranks hold different
/// parts of it (GradientGroups::distinct: experts, shards; empty for a
/// replicated weight), over which the clipping norm sums its squares.
struct ParamUpdate {
  BlockArgument param;
  Value grad;
  SmallVector<int16_t> normAxes;
};

/// Emits the updates at `builder`'s insertion point, adding the state and
/// step-input arguments to `func`. Returns the values the step returns
/// after the loss: the new parameters, then the new state, in argument
/// order.
FailureOr<SmallVector<Value>> emitOptimizerUpdates(
    FunctionOpInterface func, OpBuilder &builder, ModelAttr model,
    const OptimizerConfig &config, ArrayRef<ParamUpdate> updates);

} // namespace mlir::moe

#endif // MOE_LIB_TRANSFORMS_OPTIMIZERUPDATES_H
