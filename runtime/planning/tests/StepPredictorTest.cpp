//===- StepPredictorTest.cpp - the next block's counts inside the step ----===//

#include "moe_rt/step_predictor.h"

#include <gtest/gtest.h>

using namespace moe_rt::planning;

namespace {

/// Kind 0 samples send their 8 tokens to expert 0 in block 0 and expert 3
/// in block 1; kind 1 to expert 1, then expert 2.
CountMatrix block0(const std::vector<int> &kinds) {
  CountMatrix m(int(kinds.size()), 4);
  for (size_t i = 0; i < kinds.size(); ++i)
    m.at(int(i), kinds[i] == 0 ? 0 : 1) = 8;
  return m;
}
CountMatrix block1(const std::vector<int> &kinds) {
  CountMatrix m(int(kinds.size()), 4);
  for (size_t i = 0; i < kinds.size(); ++i)
    m.at(int(i), kinds[i] == 0 ? 3 : 2) = 8;
  return m;
}
std::vector<int> moved(const std::vector<int> &kinds,
                       const std::vector<int> &rank) {
  // 2 ranks, 2 samples each: the order a placing combine leaves.
  std::vector<int> out;
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < kinds.size(); ++i)
      if (rank[i] == r)
        out.push_back(kinds[i]);
  return out;
}

} // namespace

TEST(StepPredictor, FollowPlacementOrdersRowsByNewRank) {
  CountMatrix m(4, 1);
  for (int i = 0; i < 4; ++i)
    m.at(i, 0) = uint32_t(10 + i);
  CountMatrix f = followPlacement(m, {1, 0, 0, 1}, 2);
  ASSERT_EQ(f.rows, 4);
  EXPECT_EQ(f.at(0, 0), 11u);
  EXPECT_EQ(f.at(1, 0), 12u);
  EXPECT_EQ(f.at(2, 0), 10u);
  EXPECT_EQ(f.at(3, 0), 13u);
  EXPECT_EQ(followPlacement(m, {1, 1, 1, 0}, 2).rows, 0) << "unbalanced";
  EXPECT_EQ(followPlacement(m, {0, 2, 0, 1}, 2).rows, 0) << "no rank 2";
  EXPECT_EQ(followPlacement(m, {0, 1}, 2).rows, 0) << "too short";
}

// Two steps of a 2-block model on 2 ranks whose placement reverses the
// samples: the second step predicts block 1 exactly, in block 0's sample
// order, and scores 0 error. Pairing the rows without the placement would
// learn kind 0 -> expert 2 and mispredict.
TEST(StepPredictor, LearnsAcrossStepsThroughThePlacement) {
  StepPredictor p(1.0);
  std::vector<int> place = {1, 1, 0, 0};
  CountMatrix next;
  for (int step = 0; step < 2; ++step) {
    std::vector<int> kinds =
        step == 0 ? std::vector<int>{0, 0, 1, 1} : std::vector<int>{1, 0, 0, 1};
    bool predicted = p.beforeSolve(0, 0, block0(kinds), nullptr, 2, next);
    EXPECT_EQ(predicted, step == 1);
    if (predicted)
      EXPECT_EQ(next, block1(kinds));
    EXPECT_FALSE(
        p.beforeSolve(0, 1, block1(moved(kinds, place)), &place, 2, next))
        << "block 1 is the last: nothing to predict";
    StepPredictor::Accuracy a = p.takeAccuracy();
    EXPECT_EQ(a.blocks, step);
    EXPECT_EQ(a.absError, 0.0);
    EXPECT_EQ(a.tokens, step == 1 ? 32.0 : 0.0);
  }
}

// Micro-batches keep their own previous block; a failed previous solve
// (no placement) learns nothing.
TEST(StepPredictor, MicroBatchesAndFailedSolves) {
  StepPredictor p(1.0);
  std::vector<int> kinds = {0, 1, 0, 1}, place = {0, 0, 1, 1};
  CountMatrix next;
  p.beforeSolve(0, 0, block0(kinds), nullptr, 2, next);
  p.beforeSolve(1, 0, block0(kinds), nullptr, 2, next);
  p.beforeSolve(1, 1, block1(moved(kinds, place)), nullptr, 2, next);
  EXPECT_FALSE(p.beforeSolve(0, 0, block0(kinds), nullptr, 2, next))
      << "micro-batch 1's block 1 had no placement: nothing learned";
  p.beforeSolve(0, 1, block1(moved(kinds, place)), &place, 2, next);
  ASSERT_TRUE(p.beforeSolve(1, 0, block0(kinds), nullptr, 2, next));
  EXPECT_EQ(next, block1(kinds));
}
