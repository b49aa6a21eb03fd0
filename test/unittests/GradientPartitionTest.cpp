//===- GradientPartitionTest.cpp - FSMoE §5 on known answers --------------===//
//
// Step 1 on hand-computed instances, causality, and step 2 against brute
// force over a fine grid of the extra bytes on instances with one and two
// MoE windows; the differential-evolution result is never worse than the
// greedy or the trivial assignment.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/GradientPartition.h"

#include <gtest/gtest.h>

#include <random>

using namespace mlir::moe;

namespace {

GradientWindow dense(double us, double ready = 0) {
  GradientWindow w;
  w.denseUs = us;
  w.readyBytes = ready;
  return w;
}

GradientWindow moe(const MoePhaseCosts &c, double ready = 0) {
  GradientWindow w;
  w.moe = c;
  w.readyBytes = ready;
  return w;
}

// All-to-all bound (PipelineDegreeTest): alone, r = 2, 42 us, and the
// inter-node link idles t_ag,2 + t_rs,2 = 6 us between the dispatches and
// the combines.
const MoePhaseCosts kA2aBound{{1, 16}, {1, 4}, {1, 4}, {0.5, 2}};
const AllReduceTime kAr{2, 0.02}; // t(n) = 2 + n / 50

TEST(GradientPartition, GreedyCarryFillsWindowsInOrder) {
  // 500 B need 12 us; the first window holds (10 - 2) / 0.02 = 400 B, the
  // second the remaining 100 B (4 us <= 20 us).
  std::vector<GradientWindow> w{dense(10, 500), dense(20)};
  PartitionOptions greedyOnly;
  greedyOnly.differentialEvolution = false;
  GradientPlan p = partitionGradients(w, kAr, greedyOnly);
  EXPECT_DOUBLE_EQ(p.windows[0].bytes, 400);
  EXPECT_DOUBLE_EQ(p.windows[1].bytes, 100);
  EXPECT_DOUBLE_EQ(p.tailBytes, 0);
  EXPECT_DOUBLE_EQ(p.predictedUs, 30);
  EXPECT_EQ(p.source, GradientPlan::Source::Greedy);
}

TEST(GradientPartition, MoeWindowTakesItsOverlappableTime) {
  // The MoE window's t_olp is 6 us: (6 - 2) / 0.02 = 200 B fit without
  // changing the layer (Case 3 holds while t_gar <= 6). 1000 B are ready;
  // 800 B remain for step 2.
  std::vector<GradientWindow> w{moe(kA2aBound, 1000)};
  PartitionOptions greedyOnly;
  greedyOnly.differentialEvolution = false;
  GradientPlan p = partitionGradients(w, kAr, greedyOnly);
  EXPECT_NEAR(p.windows[0].greedyBytes, 200, 1e-9);
  EXPECT_EQ(p.windows[0].degree, 2);
  EXPECT_NEAR(p.windows[0].timeUs, 42, 1e-9);
  EXPECT_NEAR(p.tailBytes, 800, 1e-9);
  EXPECT_NEAR(p.predictedUs, 42 + 2 + 16, 1e-9);
}

TEST(GradientPartition, NothingIsReducedBeforeItExists) {
  // The gradient appears only before the dense window after the MoE layer.
  std::vector<GradientWindow> w{moe(kA2aBound), dense(5, 1000)};
  GradientPlan p = partitionGradients(w, kAr);
  EXPECT_DOUBLE_EQ(p.windows[0].bytes, 0);
  std::vector<double> bytes{p.windows[0].bytes, p.windows[1].bytes};
  EXPECT_TRUE(isCausalPartition(w, bytes));
  EXPECT_FALSE(isCausalPartition(w, {10, 0}));
}

/// Brute force of step 2: the best extra bytes over a grid, for windows
/// whose MoE windows are `moeIndex`, within causality.
double bruteForce(const std::vector<GradientWindow> &w,
                  const std::vector<double> &greedy, int steps) {
  std::vector<size_t> moeIndex;
  for (size_t j = 0; j < w.size(); ++j)
    if (w[j].moe)
      moeIndex.push_back(j);
  double produced = 0, reduced = 0;
  for (size_t j = 0; j < w.size(); ++j) {
    produced += w[j].readyBytes;
    reduced += greedy[j];
  }
  double rest = produced - reduced, best = INFINITY;
  std::vector<int> k(moeIndex.size(), 0);
  while (true) {
    std::vector<double> bytes = greedy;
    for (size_t m = 0; m < moeIndex.size(); ++m)
      bytes[moeIndex[m]] += rest * k[m] / steps;
    if (isCausalPartition(w, bytes, 1e-6)) {
      GradientPlan p;
      evaluatePartition(w, kAr, PartitionOptions{}, bytes, p);
      best = std::min(best, p.predictedUs);
    }
    size_t m = 0;
    while (m < k.size() && ++k[m] > steps)
      k[m++] = 0;
    if (m == k.size())
      break;
  }
  return best;
}

TEST(GradientPartition, EvolutionMatchesBruteForceOnOneMoeWindow) {
  std::vector<GradientWindow> w{moe(kA2aBound, 1000), dense(3)};
  GradientPlan p = partitionGradients(w, kAr);
  std::vector<double> greedy{p.windows[0].greedyBytes,
                             p.windows[1].greedyBytes};
  double brute = bruteForce(w, greedy, 2000);
  EXPECT_LE(p.predictedUs, brute + 1e-3);
  EXPECT_LE(p.predictedUs, p.greedyUs);
  EXPECT_LE(p.predictedUs, p.trivialUs);
  // By hand: step 1 puts 200 B in the layer (its 6 us window) and 50 B in
  // the 3 us dense window; 750 B would be exposed: 42 + 3 + 17 = 62 us.
  // All 950 B in the layer: t_gar = 21 us, r = 1 turns Case 1 (21 > 12.5),
  // 2*17 + 21 = 55 us, and 55 + 3 = 58 us with nothing exposed.
  EXPECT_NEAR(p.greedyUs, 62, 1e-9);
  EXPECT_NEAR(p.predictedUs, 58, 1e-6);
  EXPECT_NEAR(p.tailBytes, 0, 1e-6);
  EXPECT_EQ(p.windows[0].degree, 1);
}

TEST(GradientPartition, EvolutionMatchesBruteForceOnTwoMoeWindows) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.2, 3.0);
  for (int i = 0; i < 6; ++i) {
    MoePhaseCosts a{{u(rng), 10 * u(rng)}, {u(rng), 5 * u(rng)},
                    {u(rng), 5 * u(rng)}, {u(rng), 20 * u(rng)}};
    MoePhaseCosts b = a.withExpertScaled(u(rng));
    std::vector<GradientWindow> w{moe(a, 400 * u(rng)), dense(4 * u(rng)),
                                  moe(b, 400 * u(rng)), dense(4 * u(rng))};
    GradientPlan p = partitionGradients(w, kAr);
    std::vector<double> greedy, bytes;
    for (const WindowPlan &x : p.windows) {
      greedy.push_back(x.greedyBytes);
      bytes.push_back(x.bytes);
    }
    EXPECT_TRUE(isCausalPartition(w, bytes)) << i;
    double brute = bruteForce(w, greedy, 200);
    EXPECT_LE(p.predictedUs, brute + 1e-2) << i;
    EXPECT_LE(p.predictedUs, p.greedyUs) << i;
    EXPECT_LE(p.predictedUs, p.trivialUs) << i;
    EXPECT_TRUE(p.evolutionError.empty()) << p.evolutionError;
  }
}

TEST(GradientPartition, NeverWorseThanGreedyOrTrivialOnRandomStacks) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.1, 4.0);
  for (int i = 0; i < 20; ++i) {
    std::vector<GradientWindow> w;
    int layers = 2 + i % 6;
    for (int l = 0; l < layers; ++l) {
      MoePhaseCosts c{{u(rng), 10 * u(rng)}, {u(rng), 8 * u(rng)},
                      {u(rng), 8 * u(rng)}, {u(rng), 20 * u(rng)}};
      w.push_back(moe(c, l == 0 ? 0 : 500 * u(rng)));
      w.push_back(dense(5 * u(rng)));
    }
    GradientPlan p = partitionGradients(w, kAr);
    std::vector<double> bytes;
    for (const WindowPlan &x : p.windows)
      bytes.push_back(x.bytes);
    EXPECT_TRUE(isCausalPartition(w, bytes)) << i;
    EXPECT_LE(p.predictedUs, p.greedyUs + 1e-9) << i;
    EXPECT_LE(p.predictedUs, p.trivialUs + 1e-9) << i;
  }
}

} // namespace
