//===- PipelineDegreeTest.cpp - FSMoE Algorithm 1 on known answers --------===//
//
// Hand-computed instances for each case (the paper gives no numeric worked
// example), and random instances on which Algorithm 1's SLSQP path must
// agree with exhaustive enumeration of the degrees and its continuous
// optima with brute force over a fine grid.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/PipelineDegree.h"

#include <gtest/gtest.h>

#include <random>

using namespace mlir::moe;

namespace {

MoePhaseCosts costs(double a2aA, double a2aW, double agA, double agW,
                    double rsA, double rsW, double expA, double expW) {
  return {{a2aA, a2aW}, {agA, agW}, {rsA, rsW}, {expA, expW}};
}

// All-to-all bound: t_a2a,r > t_ag,r and little expert work. By hand:
// r=1 Case 2, 34+5+5+2.5 = 46.5; r=2 Case 3, 2*2*9+3+3 = 42; r=4 Case 3,
// 8*5+2+2 = 44; r=8 Case 3, 16*3+1.5+1.5 = 51. f3 = 2r + 34 + 8/r has its
// continuous minimum at r = sqrt(8/2) = 2 (digest: sqrt((W_ag+W_rs)/2a)).
const MoePhaseCosts kA2aBound = costs(1, 16, 1, 4, 1, 4, 0.5, 2);
// The mirror image, intra-node bound: r=2 gives Case 4, 2*3 + 2*9 + 2*9.
const MoePhaseCosts kIntraBound = costs(1, 4, 1, 16, 1, 16, 0.5, 2);
// Expert bound: f2 = 36 + 12/r + 2r, continuous optimum sqrt(6).
const MoePhaseCosts kExpertBound = costs(1, 4, 1, 2, 1, 2, 2, 32);

TEST(PipelineDegree, HandComputedCases) {
  EXPECT_EQ(classifyPipelineCase(kA2aBound, 1, 0), PipelineCase::ExpertBound);
  EXPECT_DOUBLE_EQ(pipelineTime(kA2aBound, 1, 0), 46.5);
  for (auto [r, t] : {std::pair{2.0, 42.0}, {4.0, 44.0}, {8.0, 51.0}}) {
    EXPECT_EQ(classifyPipelineCase(kA2aBound, r, 0),
              PipelineCase::AllToAllBound)
        << r;
    EXPECT_DOUBLE_EQ(pipelineTime(kA2aBound, r, 0), t) << r;
  }
  DegreeChoice c = findOptimalPipelineDegree(kA2aBound, 0);
  EXPECT_EQ(c.degree, 2);
  EXPECT_DOUBLE_EQ(c.timeUs, 42);
  EXPECT_EQ(c.pipelineCase, PipelineCase::AllToAllBound);

  c = findOptimalPipelineDegree(kIntraBound, 0);
  EXPECT_EQ(c.degree, 2);
  EXPECT_DOUBLE_EQ(c.timeUs, 42);
  EXPECT_EQ(c.pipelineCase, PipelineCase::IntraNodeBound);

  c = findOptimalPipelineDegree(kExpertBound, 0);
  EXPECT_EQ(c.degree, 2);
  EXPECT_DOUBLE_EQ(c.timeUs, 46);
  EXPECT_EQ(c.pipelineCase, PipelineCase::ExpertBound);
}

TEST(PipelineDegree, GradientAllReduceFillsTheGapThenDominates) {
  // t_gar = 6 = t_ag,2 + t_rs,2 exactly: still Case 3 (Q4 is strict).
  EXPECT_EQ(classifyPipelineCase(kA2aBound, 2, 6), PipelineCase::AllToAllBound);
  // t_gar = 10 > 6: Case 1, f1 = 2*2*9 + 10 = 46; at r = 1 Q5 (10 > 12.5)
  // fails, so r = 1 stays Case 2 at 46.5, and r = 2 wins.
  EXPECT_EQ(classifyPipelineCase(kA2aBound, 2, 10),
            PipelineCase::InterNodeBound);
  DegreeChoice c = findOptimalPipelineDegree(kA2aBound, 10);
  EXPECT_EQ(c.degree, 2);
  EXPECT_DOUBLE_EQ(c.timeUs, 46);
  EXPECT_EQ(c.pipelineCase, PipelineCase::InterNodeBound);
  // A huge all-reduce: Case 1 everywhere, f1 grows with r, so r = 1.
  c = findOptimalPipelineDegree(kA2aBound, 1000);
  EXPECT_EQ(c.degree, 1);
  EXPECT_DOUBLE_EQ(c.timeUs, 2 * 17 + 1000);
}

TEST(PipelineDegree, OverlapWindowPerCase) {
  // §5.2: Case 3: t_ag,r + t_rs,r; Case 4: r(t_ag + t_rs) - 2(r-1)t_a2a;
  // Case 2: r t_exp + t_ag + t_rs - 2(r-1) t_a2a.
  EXPECT_DOUBLE_EQ(pipelineOverlapWindow(kA2aBound, 2), 3 + 3);
  EXPECT_DOUBLE_EQ(pipelineOverlapWindow(kIntraBound, 2), 2 * 18 - 2 * 3);
  EXPECT_DOUBLE_EQ(pipelineOverlapWindow(kExpertBound, 2), 36 + 4 - 2 * 3);
}

TEST(PipelineDegree, BackwardDoublesTheExpertOnly) {
  MoePhaseCosts b = kExpertBound.withExpertScaled(2);
  EXPECT_DOUBLE_EQ(b.expert.alphaUs, 4);
  EXPECT_DOUBLE_EQ(b.expert.workUs, 64);
  EXPECT_DOUBLE_EQ(b.allToAll.workUs, kExpertBound.allToAll.workUs);
  EXPECT_DOUBLE_EQ(b.allGather.alphaUs, kExpertBound.allGather.alphaUs);
}

TEST(PipelineDegree, ContinuousOptimaMatchTheClosedForms) {
  ContinuousOptimum o =
      solvePipelineCase(kA2aBound, PipelineCase::AllToAllBound, 0, 8);
  ASSERT_TRUE(o.feasible);
  EXPECT_NEAR(o.r, 2.0, 1e-6);
  EXPECT_NEAR(o.timeUs, 42.0, 1e-9);
  o = solvePipelineCase(kExpertBound, PipelineCase::ExpertBound, 0, 8);
  ASSERT_TRUE(o.feasible);
  EXPECT_NEAR(o.r, std::sqrt(6.0), 1e-6);
  EXPECT_NEAR(o.timeUs, 36 + 2 * std::sqrt(24.0), 1e-9);
  // Case 1 needs a gradient all-reduce; without one it holds nowhere.
  EXPECT_FALSE(
      solvePipelineCase(kExpertBound, PipelineCase::InterNodeBound, 0, 8)
          .feasible);
}

TEST(PipelineDegree, DegreeSetIsRespected) {
  DegreeOptions odd;
  odd.degrees = {1, 3, 5};
  DegreeChoice c = findOptimalPipelineDegree(kExpertBound, 0, odd);
  // f2(3) = 36 + 4 + 6 = 46 beats f2(1) = 50 and f2(5) = 48.4.
  EXPECT_EQ(c.degree, 3);
  EXPECT_DOUBLE_EQ(c.timeUs, 46);
}

/// Random instances over several orders of magnitude, some with a gradient
/// all-reduce.
MoePhaseCosts randomCosts(std::mt19937 &rng) {
  std::uniform_real_distribution<double> alpha(0.0, 1.0), logWork(-1.0, 2.5);
  auto part = [&] {
    return ChunkedCost{alpha(rng), std::pow(10.0, logWork(rng))};
  };
  MoePhaseCosts c{part(), part(), part(), part()};
  // FSMoE assumes t_ag ~ t_rs; half of the instances keep them apart.
  if (rng() % 2)
    c.reduceScatter = c.allGather;
  return c;
}

TEST(PipelineDegree, SlsqpAgreesWithEnumerationOnRandomInstances) {
  std::mt19937 rng(20250401);
  DegreeOptions slsqp, enumerate;
  enumerate.solver = DegreeOptions::Solver::Enumerate;
  int differentCases = 0;
  for (int i = 0; i < 3000; ++i) {
    MoePhaseCosts c = randomCosts(rng);
    double tGar = (i % 3 == 0) ? 0.0
                               : std::pow(10.0, std::uniform_real_distribution<
                                                    double>(-1, 2.5)(rng));
    DegreeChoice a = findOptimalPipelineDegree(c, tGar, slsqp);
    DegreeChoice b = findOptimalPipelineDegree(c, tGar, enumerate);
    ASSERT_FALSE(a.solverFailed) << "instance " << i;
    ASSERT_EQ(a.degree, b.degree) << "instance " << i;
    ASSERT_DOUBLE_EQ(a.timeUs, b.timeUs) << "instance " << i;
    differentCases += a.pipelineCase != PipelineCase::ExpertBound;
  }
  // The instances exercise more than one case.
  EXPECT_GT(differentCases, 300);
}

TEST(PipelineDegree, ContinuousOptimaMatchAFineGrid) {
  std::mt19937 rng(7);
  const double rMax = 8, step = 1e-3;
  for (int i = 0; i < 200; ++i) {
    MoePhaseCosts c = randomCosts(rng);
    double tGar = (i % 2) ? 0.0 : std::pow(10.0, std::uniform_real_distribution<
                                                     double>(-1, 2.5)(rng));
    for (PipelineCase which :
         {PipelineCase::InterNodeBound, PipelineCase::ExpertBound,
          PipelineCase::AllToAllBound, PipelineCase::IntraNodeBound}) {
      double gridBest = INFINITY;
      for (double r = 1; r <= rMax + 1e-12; r += step)
        if (classifyPipelineCase(c, r, tGar) == which)
          gridBest = std::min(gridBest, pipelineCaseTime(c, which, r, tGar));
      ContinuousOptimum o = solvePipelineCase(c, which, tGar, rMax);
      if (gridBest == INFINITY) {
        // The case may still hold on an interval thinner than the grid.
        continue;
      }
      ASSERT_TRUE(o.feasible) << "instance " << i << " case " << int(which);
      // SLSQP is at least as good as the grid and no worse than the grid's
      // resolution allows.
      double scale = std::abs(gridBest) + 1;
      EXPECT_LE(o.timeUs, gridBest + 1e-9 * scale)
          << "instance " << i << " case " << int(which);
      EXPECT_GE(o.timeUs, gridBest - 1e-2 * scale)
          << "instance " << i << " case " << int(which);
    }
  }
}

} // namespace
