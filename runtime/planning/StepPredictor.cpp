//===- StepPredictor.cpp - the next block's counts inside the step --------===//

#include "moe_rt/step_predictor.h"

namespace moe_rt {
namespace planning {

CountMatrix followPlacement(const CountMatrix &counts,
                            const std::vector<int> &sampleRank, int ranks) {
  if (ranks < 1 || counts.rows % ranks ||
      sampleRank.size() != size_t(counts.rows))
    return CountMatrix();
  int perRank = counts.rows / ranks;
  std::vector<int> filled(ranks, 0);
  CountMatrix out(counts.rows, counts.experts);
  for (int i = 0; i < counts.rows; ++i) {
    int r = sampleRank[i];
    if (r < 0 || r >= ranks || filled[r] == perRank)
      return CountMatrix();
    std::copy(counts.row(i), counts.row(i) + counts.experts,
              &out.at(r * perRank + filled[r]++, 0));
  }
  return out;
}

bool StepPredictor::beforeSolve(int micro, int block,
                                const CountMatrix &counts,
                                const std::vector<int> *previousPlacement,
                                int ranks, CountMatrix &next) {
  Planned &prev = last[micro];
  // The previous planned block of this micro-batch in this step: blocks
  // are planned in increasing order within a step, so a block id not
  // below this one is last step's.
  if (prev.block >= 0 && prev.block < block && previousPlacement) {
    CountMatrix moved = followPlacement(prev.counts, *previousPlacement, ranks);
    if (moved.rows == counts.rows && moved.rows > 0) {
      predictor.observe(prev.block, moved, counts);
      nextRowSum[prev.block] = counts.rows ? counts.rowSum(0) : 0;
      if (prev.predicted.rows) {
        CountMatrix predicted =
            followPlacement(prev.predicted, *previousPlacement, ranks);
        double err = predictionError(predicted, counts);
        if (err == err) { // not NaN: the shapes agree
          double tokens = double(counts.total());
          accuracy.absError += err * tokens;
          accuracy.tokens += tokens;
          ++accuracy.blocks;
        }
      }
    }
  }
  prev.block = block;
  prev.counts = counts;
  prev.predicted = CountMatrix();
  auto rowSum = nextRowSum.find(block);
  if (rowSum == nextRowSum.end() ||
      !predictor.predict(block, counts, rowSum->second, next))
    return false;
  prev.predicted = next;
  return true;
}

StepPredictor::Accuracy StepPredictor::takeAccuracy() {
  Accuracy a = accuracy;
  accuracy = Accuracy();
  return a;
}

} // namespace planning
} // namespace moe_rt
