/*===- routing_predictor.h - next block's counts, per sample -----*- C++ -*-===*
 *
 * NetMoE's objective (Eq. 5, 10) includes the scatter of block l+1, whose
 * counts num^(l+1) are unknown when block l's placement is solved (the
 * gate of l+1 has not run). The paper leaves the predictor open ("routing
 * frequency statistics", §3.3). Ours, documented in docs/load-aware.md
 * "Predicting the next block":
 *
 *   pred_i = (L K_{l+1} / L K_l) * num^(l)_i * T^(l)
 *
 * T^(l) (E_l x E_{l+1}, rows summing to 1) says where the next block sends
 * the tokens of samples that block l sent to expert e. It is learned from
 * earlier steps' records -- each sample's block-l tokens on e are spread
 * over block l+1's experts in that sample's own block-(l+1) proportions --
 * and smoothed over steps by an exponential moving average. Rows are then
 * rounded to integers that keep each sample's total (largest remainder).
 *
 * Why per sample: a prediction that gives every sample the same row (block
 * l+1's global expert frequencies) adds the same cost to every balanced
 * placement, so it cannot change the plan. Only what distinguishes samples
 * -- their own block-l routing -- can.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_ROUTING_PREDICTOR_H
#define MOE_RT_ROUTING_PREDICTOR_H

#include "moe_rt/routing_counts.h"

#include <map>

namespace moe_rt {
namespace planning {

class NextBlockPredictor {
public:
  /// `decay` in (0, 1]: the weight of the newest step's transition in the
  /// moving average (1 = only the latest step).
  explicit NextBlockPredictor(double decay = 0.5) : decay(decay) {}

  /// Learns from one (step, micro-batch): block `block`'s counts and the
  /// next MoE block's counts of the same samples.
  void observe(int block, const CountMatrix &current, const CountMatrix &next);

  /// Predicts the next block's counts of the samples whose block-`block`
  /// counts are `current`, each row summing to `nextRowSum` (L x K of the
  /// next block). False, leaving `out` alone, when `block` has not been
  /// observed (or the shapes differ from what was): the planner then drops
  /// the next-scatter term.
  bool predict(int block, const CountMatrix &current, uint64_t nextRowSum,
               CountMatrix &out) const;

  bool hasStatistics(int block) const { return transitions.count(block); }

private:
  struct Transition {
    int from = 0, to = 0;
    std::vector<double> share; // from x to, each row sums to 1
  };
  double decay;
  std::map<int, Transition> transitions;
};

/// How far a prediction is from the truth: sum |predicted - actual| over
/// sum actual (0 = exact, 2 = disjoint), over all samples and experts;
/// NaN when the shapes differ.
double predictionError(const CountMatrix &predicted, const CountMatrix &actual);

} // namespace planning
} // namespace moe_rt

#endif // MOE_RT_ROUTING_PREDICTOR_H
