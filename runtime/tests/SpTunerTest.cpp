//===- SpTunerTest.cpp - Bayesian optimisation of S_p ---------------------===//

#include "moe_rt/sp_tuner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

namespace {

using Objective = std::function<double(double)>;

/// Runs a tuner on f over (0, 1] and returns the best value it found.
double tune(moe_rt_tune_method method, const Objective &f, uint64_t seed,
            int samples = 8) {
  moe_rt::SpTuner tuner(method, 1.0, samples, seed);
  while (!tuner.done()) {
    double x = tuner.next();
    tuner.report(x, f(x));
  }
  return tuner.bestTime();
}

double minimum(const Objective &f) {
  double best = f(1.0);
  for (int i = 1; i <= 100000; ++i)
    best = std::min(best, f(i / 100000.0));
  return best;
}

// A family of known 1-D objectives shaped like iteration time (ms, around
// 100 as in FlowMoE Table A.3) against S_p (Fig. 4 / Theorem 2): per-chunk
// start-up cost ~ 1/S, lost overlap ~ S, plus bowls and mild ripples, minima
// spread over the range.
std::vector<Objective> family(int count) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<Objective> fs;
  for (int i = 0; i < count; ++i) {
    double a = 0.002 + 0.05 * u(rng), b = 0.5 + 2 * u(rng);
    double c = 0.05 + 0.9 * u(rng), w = 1 + 4 * u(rng);
    double ripple = 0.02 * u(rng), freq = 10 + 20 * u(rng);
    switch (i % 3) {
    case 0:
      fs.push_back([=](double x) { return 100 * (1 + a / x + b * x); });
      break;
    case 1:
      fs.push_back([=](double x) {
        return 100 * (1 + w * (x - c) * (x - c) + ripple * std::sin(freq * x));
      });
      break;
    default:
      fs.push_back([=](double x) {
        return 100 * (1 + a / x + b * x * x + ripple * std::cos(freq * x));
      });
    }
  }
  return fs;
}

// FlowMoE App. D / Table A.3: with 8 samples, BO finds better S_p than grid
// search and random search on average.
TEST(SpTuner, BayesBeatsGridAndRandomOnAverage) {
  std::vector<Objective> fs = family(60);
  double bayes = 0, grid = 0, random = 0;
  for (size_t i = 0; i < fs.size(); ++i) {
    double best = minimum(fs[i]);
    bayes += tune(MOE_RT_TUNE_BAYES, fs[i], i) - best;
    grid += tune(MOE_RT_TUNE_GRID, fs[i], i) - best;
    random += tune(MOE_RT_TUNE_RANDOM, fs[i], i) - best;
  }
  bayes /= fs.size();
  grid /= fs.size();
  random /= fs.size();
  EXPECT_LT(bayes, grid) << "mean regret: bayes " << bayes << ", grid " << grid;
  EXPECT_LT(bayes, random) << "mean regret: bayes " << bayes << ", random "
                           << random;
  RecordProperty("regret_bayes", std::to_string(bayes));
  RecordProperty("regret_grid", std::to_string(grid));
}

TEST(SpTuner, GridIsEvenlySpacedUpToTheMaximum) {
  moe_rt::SpTuner tuner(MOE_RT_TUNE_GRID, 16.0, 8, 0);
  for (int i = 1; i <= 8; ++i) {
    double x = tuner.next();
    EXPECT_DOUBLE_EQ(x, 2.0 * i);
    tuner.report(x, 100 - x);
  }
  EXPECT_TRUE(tuner.done());
  EXPECT_DOUBLE_EQ(tuner.bestSp(), 16.0);
  EXPECT_DOUBLE_EQ(tuner.next(), 16.0) << "once done, next() is the best";
}

TEST(SpTuner, SamplesStayInRangeAndThePosteriorInterpolates) {
  auto f = [](double x) { return 3 + (x - 0.3) * (x - 0.3); };
  moe_rt::SpTuner tuner(MOE_RT_TUNE_BAYES, 2.0, 8, 5);
  std::vector<std::pair<double, double>> seen;
  while (!tuner.done()) {
    double sp = tuner.next();
    ASSERT_GT(sp, 0.0);
    ASSERT_LE(sp, 2.0);
    tuner.report(sp, f(sp / 2));
    seen.push_back({sp, f(sp / 2)});
  }
  // The GP (of log time) passes (almost) through its samples.
  for (auto [sp, y] : seen) {
    double mean, stddev;
    tuner.posterior(sp / 2, mean, stddev);
    EXPECT_NEAR(mean, std::log(y), 1e-3);
    EXPECT_LT(stddev, 1e-2);
  }
  EXPECT_NEAR(tuner.bestSp() / 2, 0.3, 0.08);
}

// Eq. A.11: re-tune when |T - F(best)| / F(best) > delta.
TEST(SpTuner, RetuneTrigger) {
  moe_rt_sp_tuner t;
  ASSERT_EQ(moe_rt_sp_tuner_create(MOE_RT_TUNE_BAYES, 1e6, 8, 1, &t),
            MOE_RT_OK);
  EXPECT_EQ(moe_rt_sp_tuner_should_retune(t, 500, 0.1), 0)
      << "nothing measured yet";
  ASSERT_EQ(moe_rt_sp_tuner_report(t, 2e5, 100.0), MOE_RT_OK);
  EXPECT_EQ(moe_rt_sp_tuner_should_retune(t, 105, 0.1), 0);
  EXPECT_EQ(moe_rt_sp_tuner_should_retune(t, 111, 0.1), 1);
  EXPECT_EQ(moe_rt_sp_tuner_should_retune(t, 89, 0.1), 1);
  double sp, time;
  ASSERT_EQ(moe_rt_sp_tuner_best(t, &sp, &time), MOE_RT_OK);
  EXPECT_DOUBLE_EQ(sp, 2e5);
  EXPECT_DOUBLE_EQ(time, 100.0);
  ASSERT_EQ(moe_rt_sp_tuner_reset(t), MOE_RT_OK);
  EXPECT_EQ(moe_rt_sp_tuner_best(t, &sp, &time), MOE_RT_UNAVAILABLE);
  moe_rt_sp_tuner_destroy(t);
}

TEST(SpTuner, OnlineLoopThroughTheCApi) {
  moe_rt_sp_tuner t;
  ASSERT_EQ(moe_rt_sp_tuner_create(MOE_RT_TUNE_BAYES, 16e6, 8, 3, &t),
            MOE_RT_OK);
  int steps = 0;
  while (!moe_rt_sp_tuner_done(t)) {
    double sp;
    ASSERT_EQ(moe_rt_sp_tuner_next(t, &sp), MOE_RT_OK);
    double mb = sp / 1e6;
    ASSERT_EQ(moe_rt_sp_tuner_report(t, sp, 90 + 4 / mb + 1.5 * mb), MOE_RT_OK);
    ++steps;
  }
  EXPECT_EQ(steps, 8);
  double sp, time;
  ASSERT_EQ(moe_rt_sp_tuner_best(t, &sp, &time), MOE_RT_OK);
  // The optimum is at sqrt(4 / 1.5) = 1.63 MB (time 94.9); the worst S_p
  // in range costs 114.3 (16 MB) or 500+ (tiny chunks).
  EXPECT_LT(time, 97.0);
  EXPECT_GT(sp, 0.5e6);
  EXPECT_LT(sp, 4e6);
  moe_rt_sp_tuner_destroy(t);
}

TEST(SpTuner, RejectsBadArguments) {
  moe_rt_sp_tuner t = nullptr;
  EXPECT_EQ(moe_rt_sp_tuner_create(MOE_RT_TUNE_BAYES, 0, 8, 1, &t),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_sp_tuner_create(MOE_RT_TUNE_BAYES, 1e6, 0, 1, &t),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(
      moe_rt_sp_tuner_create(static_cast<moe_rt_tune_method>(9), 1e6, 8, 1, &t),
      MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_sp_tuner_create(MOE_RT_TUNE_BAYES, 1e6, 8, 1, nullptr),
            MOE_RT_INVALID_ARGUMENT);
  ASSERT_EQ(moe_rt_sp_tuner_create(MOE_RT_TUNE_GRID, 1e6, 8, 1, &t), MOE_RT_OK);
  EXPECT_EQ(moe_rt_sp_tuner_report(t, 1e5, -1.0), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_sp_tuner_report(t, NAN, 1.0), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_sp_tuner_next(t, nullptr), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_sp_tuner_done(nullptr), 0);
  moe_rt_sp_tuner_destroy(t);
}

} // namespace
