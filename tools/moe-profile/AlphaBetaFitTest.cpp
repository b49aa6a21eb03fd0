//===- AlphaBetaFitTest.cpp - the profile fit on known answers ------------===//

#include "AlphaBetaFit.h"

#include <gtest/gtest.h>

#include <random>

using moe_profile::fitAlphaBeta;

TEST(AlphaBetaFit, RecoversAnExactLine) {
  std::vector<double> n, t;
  for (double bytes = 1024; bytes <= 1 << 24; bytes *= 2) {
    n.push_back(bytes);
    t.push_back(12.5 + 8e-5 * bytes); // 12.5 us + 12.5 GB/s
  }
  auto f = fitAlphaBeta(n, t);
  ASSERT_TRUE(f.ok);
  EXPECT_NEAR(f.alpha, 12.5, 1e-6);
  EXPECT_NEAR(f.beta, 8e-5, 1e-12);
  EXPECT_NEAR(f.r2, 1.0, 1e-12);
}

TEST(AlphaBetaFit, NoisyLineHasHighButImperfectR2) {
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0, 2.0);
  std::vector<double> n, t;
  for (int i = 1; i <= 40; ++i) {
    n.push_back(i * 1e5);
    t.push_back(30 + 1e-4 * i * 1e5 + noise(rng));
  }
  auto f = fitAlphaBeta(n, t);
  ASSERT_TRUE(f.ok);
  EXPECT_NEAR(f.beta, 1e-4, 5e-6);
  EXPECT_GT(f.r2, 0.99);
  EXPECT_LT(f.r2, 1.0);
}

TEST(AlphaBetaFit, NegativeInterceptIsClampedToZero) {
  auto f = fitAlphaBeta({1, 2, 3, 4}, {0.5, 2.2, 3.9, 5.6});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.alpha, 0.0);
  EXPECT_GT(f.beta, 0.0);
}

TEST(AlphaBetaFit, DegenerateInputsDoNotFit) {
  EXPECT_FALSE(fitAlphaBeta({}, {}).ok);
  EXPECT_FALSE(fitAlphaBeta({5}, {1}).ok);
  EXPECT_FALSE(fitAlphaBeta({5, 5, 5}, {1, 2, 3}).ok);
  EXPECT_FALSE(fitAlphaBeta({1, 2, 3}, {3, 2, 1}).ok) << "negative slope";
}

namespace {
struct FakeSweep {
  moe_profile::Fit fit;
  int scale;
};
} // namespace

TEST(SweepUntilFit, ReMeasuresANoisySweepWithMoreRepetitions) {
  // The first two attempts are noisy (slope <= 0), the third fits.
  std::vector<int> scales;
  int remeasured = 0;
  auto m = moe_profile::sweepUntilFit(2, remeasured, [&](int scale) {
    scales.push_back(scale);
    FakeSweep s{{}, scale};
    s.fit.ok = scale >= 4;
    return s;
  });
  EXPECT_TRUE(m.fit.ok);
  EXPECT_EQ(m.scale, 4);
  EXPECT_EQ(remeasured, 2);
  EXPECT_EQ(scales, (std::vector<int>{1, 2, 4}));
}

TEST(SweepUntilFit, StopsAfterTheRetriesAndReportsTheFailure) {
  int remeasured = 0, calls = 0;
  auto m = moe_profile::sweepUntilFit(3, remeasured, [&](int scale) {
    ++calls;
    return FakeSweep{{}, scale};
  });
  EXPECT_FALSE(m.fit.ok);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(remeasured, 3);
}

TEST(SweepUntilFit, AGoodFirstSweepIsNotRepeated) {
  int remeasured = 0, calls = 0;
  moe_profile::sweepUntilFit(2, remeasured, [&](int scale) {
    ++calls;
    FakeSweep s{{}, scale};
    s.fit.ok = true;
    return s;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(remeasured, 0);
}
