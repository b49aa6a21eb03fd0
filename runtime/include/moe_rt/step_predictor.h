/*===- step_predictor.h - the next block's counts inside the step -*- C++ -*-===*
 *
 * NetMoE's objective (Eq. 5, 10) prices block l's gather *and* block l+1's
 * scatter; when block l is planned, block l+1's gate has not run. The
 * predictor (routing_predictor.h, docs/load-aware.md "Predicting the next
 * block") maps each sample's block-l counts through a transition matrix
 * T^(l) learned from earlier observations. This class is what the training
 * step keeps between its planner calls so that the transition is learned
 * from the step's own routing:
 *
 *   - when block l' of micro-batch m is planned and the previous MoE block
 *     l < l' of the same micro-batch was planned in this step, the pair
 *     (block l's counts moved by its placement, block l''s counts) is
 *     observed: T^(l) learns, and the prediction made for l' when l was
 *     planned is scored against the truth;
 *   - then block l''s next counts are predicted from T^(l') (learned in
 *     earlier steps), or nothing when T^(l') was never observed (the first
 *     step; the last MoE block).
 *
 * Why a transition and not "the previous iteration's counts of block l+1"
 * or "block l's counts as a proxy": a new step brings new samples, so a
 * sample's own previous-step row does not exist; and expert e of block l
 * has nothing to do with expert e of block l+1, so l's row is no proxy for
 * l+1's. The transition carries what *does* persist across steps: which
 * experts of block l+1 follow which experts of block l.
 *
 * Determinism: every rank of the group calls it in the same program order
 * (the planners run in order on their host stream) with the same gathered
 * counts and placements, so every rank predicts the same counts and solves
 * the same problem: no broadcast. Not thread-safe: the caller serialises.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_STEP_PREDICTOR_H
#define MOE_RT_STEP_PREDICTOR_H

#include "moe_rt/routing_predictor.h"

#include <map>
#include <vector>

namespace moe_rt {
namespace planning {

/// `counts`' rows in the order a placement leaves the samples in: rank r
/// holds the samples i with sampleRank[i] == r, in increasing i, at rows
/// r * (rows / ranks) ... (what a placing combine returns). Empty when the
/// placement does not give every rank rows / ranks samples.
CountMatrix followPlacement(const CountMatrix &counts,
                            const std::vector<int> &sampleRank, int ranks);

class StepPredictor {
public:
  explicit StepPredictor(double decay = 0.5) : predictor(decay) {}

  /// Block `block` of micro-batch `micro` is about to be planned from
  /// `counts` (rows in the samples' current order). `previousPlacement` is
  /// the placement solved for this micro-batch's previous planned block
  /// (null: none, or its solve failed). Learns and scores as above; returns
  /// true and the next block's predicted counts (rows in `counts`' order)
  /// in `next`, or false when there is no prediction.
  bool beforeSolve(int micro, int block, const CountMatrix &counts,
                   const std::vector<int> *previousPlacement, int ranks,
                   CountMatrix &next);

  /// The predictions scored since the last call: sum |pred - true| and
  /// sum true over all scored blocks (predictionError's terms), and how
  /// many blocks were scored. Resets them.
  struct Accuracy {
    double absError = 0, tokens = 0;
    int blocks = 0;
  };
  Accuracy takeAccuracy();

private:
  struct Planned {
    int block = -1;
    CountMatrix counts, predicted; ///< predicted: rows 0 when none
  };
  NextBlockPredictor predictor;
  std::map<int, Planned> last;         ///< by micro-batch
  std::map<int, uint64_t> nextRowSum;  ///< by block: its next block's L K
  Accuracy accuracy;
};

} // namespace planning
} // namespace moe_rt

#endif // MOE_RT_STEP_PREDICTOR_H
