//===- PredictorTest.cpp - the next block's counts, per sample ------------===//

#include "TestSupport.h"

#include "moe_rt/netmoe_replay.h"
#include "moe_rt/routing_predictor.h"
#include "moe_rt/synthetic_routing.h"

#include <cmath>
#include <gtest/gtest.h>

using namespace moe_rt::planning;
using namespace planning_test;

namespace {

/// Samples of kind 0 send all tokens to expert 0 in block l and expert 3
/// in block l+1; kind 1 to expert 1, then 2; kind 2 splits evenly.
void twoBlocks(const std::vector<int> &kinds, CountMatrix &cur,
               CountMatrix &next) {
  int n = int(kinds.size());
  cur = CountMatrix(n, 4);
  next = CountMatrix(n, 4);
  for (int i = 0; i < n; ++i) {
    if (kinds[i] == 0) {
      cur.at(i, 0) = 8;
      next.at(i, 3) = 8;
    } else if (kinds[i] == 1) {
      cur.at(i, 1) = 8;
      next.at(i, 2) = 8;
    } else {
      cur.at(i, 0) = cur.at(i, 1) = 4;
      next.at(i, 2) = next.at(i, 3) = 4;
    }
  }
}

} // namespace

TEST(Predictor, LearnsWhereASamplesTokensGoNext) {
  NextBlockPredictor p(1.0);
  CountMatrix cur, next, out;
  twoBlocks({0, 1, 0, 1}, cur, next);
  EXPECT_FALSE(p.predict(0, cur, 8, out));
  p.observe(0, cur, next);
  // New samples (another step), including a mix never seen as such.
  twoBlocks({1, 2, 0, 2}, cur, next);
  ASSERT_TRUE(p.predict(0, cur, 8, out));
  EXPECT_EQ(out, next);
  EXPECT_EQ(predictionError(out, next), 0.0);
  EXPECT_FALSE(p.predict(1, cur, 8, out)) << "block 1 was never observed";
}

TEST(Predictor, KeepsRowSumsAndAverages) {
  std::mt19937_64 rng(21);
  NextBlockPredictor p(0.5);
  for (int step = 0; step < 3; ++step) {
    CountMatrix a = randomCounts(16, 8, 12, 2, rng);
    CountMatrix b = randomCounts(16, 6, 12, 1, rng);
    p.observe(2, a, b);
  }
  CountMatrix a = randomCounts(16, 8, 12, 2, rng), out;
  ASSERT_TRUE(p.predict(2, a, 12, out));
  ASSERT_EQ(out.rows, 16);
  ASSERT_EQ(out.experts, 6);
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(out.rowSum(i), 12u);
}

TEST(Predictor, ErrorMeasure) {
  CountMatrix a(1, 2), b(1, 2), c(2, 1);
  a.at(0, 0) = 4;
  b.at(0, 1) = 4;
  EXPECT_EQ(predictionError(a, a), 0.0);
  EXPECT_EQ(predictionError(a, b), 2.0);
  EXPECT_TRUE(std::isnan(predictionError(a, c)));
}

// On a synthetic trace whose samples keep their topic across blocks, the
// transition predictor beats the best sample-blind prediction (every
// sample gets the next block's overall frequencies), and NetMoE planned
// with it sends fewer tokens across nodes than planned without the next
// block; the oracle (true next counts) bounds both.
TEST(Predictor, HelpsNetMoEOnLocalityTraces) {
  SyntheticRouting s;
  s.grid = Grid{4, 2};
  s.samples = 64;
  s.tokens = 128;
  s.experts = 16;
  s.topK = 2;
  s.blocks = 4;
  s.steps = 6;
  s.locality = 0.7;
  s.seed = 3;
  TraceHeader h = syntheticHeader(s);
  std::vector<TraceRecord> all = generated(s);
  ASSERT_EQ(all.size(), size_t(s.steps * s.blocks));
  NetMoeReplay none(h, NextCounts::None), transition(h, NextCounts::Transition),
      oracle(h, NextCounts::Oracle);
  uint64_t interNone = 0, interTransition = 0, interOracle = 0;
  double errTransition = 0, errBlind = 0;
  int predictions = 0;
  for (int64_t step = 0; step < s.steps; ++step) {
    std::vector<TraceRecord> group(all.begin() + step * s.blocks,
                                   all.begin() + (step + 1) * s.blocks);
    std::vector<BlockReplay> a, b, c;
    ASSERT_EQ(none.replay(group, a), "");
    ASSERT_EQ(transition.replay(group, b), "");
    ASSERT_EQ(oracle.replay(group, c), "");
    if (step == 0) {
      for (const BlockReplay &x : b)
        EXPECT_FALSE(x.predicted) << "nothing learned before step 0";
      continue;
    }
    for (int l = 0; l < s.blocks; ++l) {
      interNone += a[l].gather.interNode + a[l].scatter.interNode;
      interTransition += b[l].gather.interNode + b[l].scatter.interNode;
      interOracle += c[l].gather.interNode + c[l].scatter.interNode;
      if (l + 1 == s.blocks)
        continue;
      ASSERT_TRUE(b[l].predicted);
      errTransition += b[l].predictionError;
      // The sample-blind prediction: block l+1's column shares.
      const CountMatrix &truth = group[l + 1].counts;
      CountMatrix blind(truth.rows, truth.experts);
      for (int e = 0; e < truth.experts; ++e) {
        uint64_t col = 0;
        for (int i = 0; i < truth.rows; ++i)
          col += truth.at(i, e);
        for (int i = 0; i < truth.rows; ++i)
          blind.at(i, e) = uint32_t(std::lround(double(col) / truth.rows));
      }
      errBlind += predictionError(blind, truth);
      ++predictions;
    }
  }
  ASSERT_GT(predictions, 0);
  EXPECT_LT(errTransition, errBlind);
  EXPECT_LT(interTransition, interNone);
  EXPECT_LE(interOracle, interTransition);
}
