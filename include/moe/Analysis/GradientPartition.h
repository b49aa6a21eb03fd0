//===- GradientPartition.h - FSMoE adaptive gradient partitioning -*- C++ -*-===//
//
// FSMoE §5 (Pan et al., ASPLOS '25): the gradient all-reduce (GAR) of the
// replicated (dense) parameters shares the inter-node link with the MoE
// layers' all-to-alls, so it is cut into slices, one per window of the
// backward pass in which the link would otherwise idle:
// - a dense window (attention backward, intra-node model-parallel
//   collectives): the slice runs beside it;
// - an MoE window: the slice is issued after the layer's last dispatch
//   all-to-all (FSMoE's FIFO order) and becomes that layer's t_gar in
//   Algorithm 1 (PipelineDegree.h), which may pick another degree.
// Step 1 (Eq. 3, 4) fills every window up to its overlappable time
// t_olp, carrying what does not fit. Step 2 (Eq. 5) spreads the
// remainder, which would otherwise be reduced after the backward pass, over
// the MoE windows by differential evolution (pagmo2), kept only when it
// beats the greedy and the trivial assignment.
//
// Causality: a slice reduces only bytes whose gradient exists before its
// window, i.e. for every window i, the bytes reduced up to i are at most
// the bytes produced up to i.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_GRADIENTPARTITION_H
#define MOE_ANALYSIS_GRADIENTPARTITION_H

#include "moe/Analysis/DifferentialEvolution.h"
#include "moe/Analysis/PipelineDegree.h"

#include <functional>
#include <optional>
#include <vector>

namespace mlir::moe {

/// One window of the backward pass, in execution order.
struct GradientWindow {
  /// Gradient bytes that become ready just before the window starts.
  double readyBytes = 0;
  /// A dense window's length; ignored for an MoE window.
  double denseUs = 0;
  /// Set for an MoE window: the layer's backward costs.
  std::optional<MoePhaseCosts> moe;
};

/// t_ar(n) = alpha + beta n for the gradient all-reduce (§5.1).
struct AllReduceTime {
  double alphaUs = 0, betaUsPerByte = 0;
  /// No slice, no start-up.
  double operator()(double bytes) const {
    return bytes > 0 ? alphaUs + betaUsPerByte * bytes : 0.0;
  }
  /// g^{-1}: the bytes one slice reduces in `us` (0 if the start-up does
  /// not fit).
  double inverse(double us) const {
    return us > alphaUs ? (us - alphaUs) / betaUsPerByte : 0.0;
  }
};

struct PartitionOptions {
  DegreeOptions degrees;
  /// An MoE window's degree and time with a slice of t_gar (default:
  /// Algorithm 1 over `degrees`); another execution model can stand in,
  /// e.g. a timeline without FSMoE's inter/intra-node overlap.
  std::function<DegreeChoice(const MoePhaseCosts &, double tGarUs)> moeLayer;
  /// How long a slice may run in an MoE window without slowing it, at the
  /// degree chosen without a slice (default: t_olp,moe, §5.2).
  std::function<double(const MoePhaseCosts &, int64_t degree)> overlapWindow;
  /// Step 2; off: the greedy step 1 alone.
  bool differentialEvolution = true;
  EvolutionOptions evolution;
};

struct WindowPlan {
  /// Bytes all-reduced in this window: step 1's slice plus step 2's extra.
  double bytes = 0, greedyBytes = 0;
  /// MoE windows: the backward degree and Algorithm 1's time for t_gar =
  /// t_ar(bytes). Dense windows: degree 0 and the window's length.
  int64_t degree = 0;
  double timeUs = 0;
};

struct GradientPlan {
  std::vector<WindowPlan> windows;
  /// Reduced after the last window, with nothing to hide behind.
  double tailBytes = 0;
  /// Sum of the window times plus t_ar(tail): what the partition minimises.
  double predictedUs = 0;
  /// The same objective for step 1 alone and for the trivial assignment
  /// (every remaining byte into the first MoE window after it is produced).
  double greedyUs = 0, trivialUs = 0;
  enum class Source { Greedy, Trivial, DifferentialEvolution };
  Source source = Source::Greedy;
  /// Set when pagmo could not run (the plan is then the better of the
  /// greedy and trivial assignments).
  std::string evolutionError;
};

/// Partitions the gradients of `windows` (backward order). Every MoE
/// window's costs are the backward phase's (expert already doubled).
GradientPlan partitionGradients(const std::vector<GradientWindow> &windows,
                                const AllReduceTime &allReduce,
                                const PartitionOptions &options = {});

/// The objective of a partition: per-window slice sizes `bytes` (same
/// length as `windows`), the tail being everything produced but not
/// reduced. Fills `plan` (windows, tail, predictedUs). Exposed for tests.
void evaluatePartition(const std::vector<GradientWindow> &windows,
                       const AllReduceTime &allReduce,
                       const PartitionOptions &options,
                       const std::vector<double> &bytes, GradientPlan &plan);

/// Whether `bytes` (one slice per window; missing trailing ones are 0)
/// respects causality: every prefix reduces at most what its windows
/// produced, up to `slackBytes`.
bool isCausalPartition(const std::vector<GradientWindow> &windows,
                       const std::vector<double> &bytes,
                       double slackBytes = 1e-6);

} // namespace mlir::moe

#endif // MOE_ANALYSIS_GRADIENTPARTITION_H
