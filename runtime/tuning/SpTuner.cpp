//===- SpTuner.cpp - Bayesian optimisation of S_p -------------------------===//
//
// FlowMoE App. D: GP regression with a Matern kernel (5/2 here), Expected
// Improvement with xi = 0.1, 8 samples over (0, largest per-block all-reduce
// tensor], one random initial sample. Times are standardised before the GP
// fit so that xi is in units of the observed spread; the length scale is
// chosen by maximising the log marginal likelihood over a small grid, which
// is robust with so few samples. Linear algebra: Eigen.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/sp_tuner.h"

#include "../src/Error.h"

#include <Eigen/Cholesky>
#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>

namespace moe_rt {
namespace {

// EI exploration xi = 0.1 (App. D), in units of the spread of the observed
// (log) times, so that it means the same whatever unit times come in.
constexpr double kXi = 0.1;
// Random samples before the GP proposes. FlowMoE uses one; with a single
// sample the GP has no spread to scale by and EI sends the second sample to
// an edge of the range. On the test family (runtime/tests/SpTunerTest.cpp)
// two random starts of the same 8-sample budget halve the mean regret and
// beat grid search; one does not.
constexpr int kInitialSamples = 2;
constexpr double kNoise = 1e-6;   // jitter on the standardised scale
constexpr int kCandidates = 1024; // EI maximised over this grid of (0, 1]
// The smallest S_p proposed, as a fraction of the largest: FlowMoE's
// reference code searches 128 KB - 16 MB. Below it, per-chunk start-up
// costs dominate whatever the hardware.
constexpr double kMinFraction = 1.0 / 128;
// Prior spread of log time before two samples give a spread to scale by:
// iteration time varying by ~20% across S_p.
constexpr double kPriorLogStd = 0.2;

double matern52(double r, double lengthScale) {
  double s = std::sqrt(5.0) * std::abs(r) / lengthScale;
  return (1.0 + s + s * s / 3.0) * std::exp(-s);
}

double normalPdf(double z) {
  return std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI);
}
double normalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

bool measuredNear(const std::vector<double> &xs, double u) {
  return std::any_of(xs.begin(), xs.end(),
                     [&](double x) { return std::abs(x - u) < 1e-3; });
}

} // namespace

SpTuner::SpTuner(moe_rt_tune_method method, double maxBytes, int samples,
                 uint64_t seed)
    : method(method), maxBytes(maxBytes), samples(samples), seed(seed),
      rng(seed) {}

void SpTuner::reset() {
  xs.clear();
  ys.clear();
  alpha.clear();
  cholesky.clear();
  fitted = 0;
  rng.seed(seed);
}

double SpTuner::bestSp() const {
  size_t i = std::min_element(ys.begin(), ys.end()) - ys.begin();
  return xs[i] * maxBytes;
}

double SpTuner::bestTime() const {
  return *std::min_element(ys.begin(), ys.end());
}

bool SpTuner::shouldRetune(double currentTime, double delta) const {
  if (!hasBest())
    return false;
  double best = bestTime();
  return std::abs(currentTime - best) / best > delta;
}

void SpTuner::report(double sp, double time) {
  xs.push_back(std::clamp(sp / maxBytes, 1e-9, 1.0));
  ys.push_back(time);
}

double SpTuner::next() {
  if (done())
    return bestSp();
  size_t n = xs.size();
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  switch (method) {
  case MOE_RT_TUNE_GRID:
    // n evenly spaced points ending at the largest size: (i + 1) / samples.
    return maxBytes * double(n + 1) / samples;
  case MOE_RT_TUNE_RANDOM:
    return maxBytes * (kMinFraction + (1 - kMinFraction) * uniform(rng));
  case MOE_RT_TUNE_BAYES:
    if (static_cast<int>(n) < kInitialSamples)
      return maxBytes * (kMinFraction + (1 - kMinFraction) * uniform(rng));
    return maxBytes * nextBayes();
  }
  return maxBytes;
}

void SpTuner::fit() {
  size_t n = xs.size();
  fitted = n;
  // The GP models log time: iteration times are positive and blow up like
  // 1/S_p for tiny chunks (start-up costs); on a log scale that tail does
  // not swamp the fit near the optimum.
  Eigen::VectorXd y(n);
  for (size_t i = 0; i < n; ++i)
    y[i] = std::log(ys[i]);
  yMean = y.mean();
  double var = n > 1 ? (y.array() - yMean).square().sum() / (n - 1) : 0.0;
  yStd = var > 0 ? std::sqrt(var) : kPriorLogStd;
  Eigen::VectorXd z = (y.array() - yMean) / yStd;

  // One sample says nothing about the length scale: take a middle one.
  // Iteration time varies smoothly with S_p (Fig. 4), so length scales
  // start at 0.3 of the range; shorter ones fit noise with 8 samples.
  std::initializer_list<double> scales = {0.3, 0.5, 0.8, 1.2, 2.0};
  std::initializer_list<double> single = {0.3};
  double bestLik = -std::numeric_limits<double>::infinity();
  for (double l : n > 1 ? scales : single) {
    Eigen::MatrixXd K(n, n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j)
        K(i, j) = matern52(xs[i] - xs[j], l) + (i == j ? kNoise : 0.0);
    Eigen::LLT<Eigen::MatrixXd> llt(K);
    if (llt.info() != Eigen::Success)
      continue;
    Eigen::VectorXd a = llt.solve(z);
    Eigen::MatrixXd L = llt.matrixL();
    double logDet = 2 * L.diagonal().array().log().sum();
    double lik = -0.5 * z.dot(a) - 0.5 * logDet;
    if (lik > bestLik) {
      bestLik = lik;
      lengthScale = l;
      alpha.assign(a.data(), a.data() + n);
      cholesky.assign(n * n, 0.0);
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j <= i; ++j)
          cholesky[i * n + j] = L(i, j);
    }
  }
}

void SpTuner::posterior(double u, double &mean, double &stddev) {
  if (fitted != xs.size())
    fit();
  size_t n = xs.size();
  Eigen::VectorXd k(n);
  for (size_t i = 0; i < n; ++i)
    k[i] = matern52(u - xs[i], lengthScale);
  Eigen::Map<const Eigen::VectorXd> a(alpha.data(), n);
  Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic,
                                 Eigen::RowMajor>>
      L(cholesky.data(), n, n);
  Eigen::VectorXd v = L.triangularView<Eigen::Lower>().solve(k);
  double var = std::max(1.0 - v.squaredNorm(), 1e-12);
  mean = yMean + yStd * k.dot(a);
  stddev = yStd * std::sqrt(var);
}

double SpTuner::nextBayes() {
  fit();
  double best = std::log(bestTime());
  double bestU = 1.0, bestEI = -1.0;
  for (int c = 0; c <= kCandidates; ++c) {
    double u = kMinFraction + (1 - kMinFraction) * double(c) / kCandidates;
    // A point already measured teaches nothing new.
    if (measuredNear(xs, u))
      continue;
    double mean, stddev;
    posterior(u, mean, stddev);
    // Minimisation on log time.
    double improvement = best - mean - kXi * yStd;
    double z = improvement / stddev;
    double ei = improvement * normalCdf(z) + stddev * normalPdf(z);
    if (ei > bestEI) {
      bestEI = ei;
      bestU = u;
    }
  }
  return bestU;
}

} // namespace moe_rt

using moe_rt::fail;
using moe_rt::ok;

struct moe_rt_sp_tuner_impl {
  moe_rt::SpTuner tuner;
};

extern "C" moe_rt_status moe_rt_sp_tuner_create(moe_rt_tune_method method,
                                                double max_bytes, int samples,
                                                uint64_t seed,
                                                moe_rt_sp_tuner *out) {
  if (!out)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_sp_tuner_create: out is NULL");
  *out = nullptr;
  if (method != MOE_RT_TUNE_BAYES && method != MOE_RT_TUNE_GRID &&
      method != MOE_RT_TUNE_RANDOM)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_sp_tuner_create: unknown method");
  if (!(max_bytes > 0) || !std::isfinite(max_bytes))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_sp_tuner_create: max_bytes must be positive");
  if (samples < 1 || samples > 1000)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_sp_tuner_create: samples must be in [1, 1000]");
  *out = new (std::nothrow)
      moe_rt_sp_tuner_impl{moe_rt::SpTuner(method, max_bytes, samples, seed)};
  if (!*out)
    return fail(MOE_RT_OUT_OF_MEMORY, "moe_rt_sp_tuner_create: out of memory");
  return ok();
}

extern "C" moe_rt_status moe_rt_sp_tuner_destroy(moe_rt_sp_tuner t) {
  if (!t)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_sp_tuner_destroy: NULL");
  delete t;
  return ok();
}

extern "C" moe_rt_status moe_rt_sp_tuner_next(moe_rt_sp_tuner t,
                                              double *sp_bytes) {
  if (!t || !sp_bytes)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_sp_tuner_next: NULL argument");
  *sp_bytes = t->tuner.next();
  return ok();
}

extern "C" moe_rt_status moe_rt_sp_tuner_report(moe_rt_sp_tuner t,
                                                double sp_bytes,
                                                double iteration_time) {
  if (!t)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_sp_tuner_report: NULL tuner");
  if (!(sp_bytes > 0) || !std::isfinite(sp_bytes) || !(iteration_time > 0) ||
      !std::isfinite(iteration_time))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_sp_tuner_report: S_p and the time must be positive "
                "and finite");
  t->tuner.report(sp_bytes, iteration_time);
  return ok();
}

extern "C" int moe_rt_sp_tuner_done(moe_rt_sp_tuner t) {
  return t && t->tuner.done() ? 1 : 0;
}

extern "C" moe_rt_status moe_rt_sp_tuner_best(moe_rt_sp_tuner t,
                                              double *sp_bytes,
                                              double *iteration_time) {
  if (!t || !sp_bytes || !iteration_time)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_sp_tuner_best: NULL argument");
  if (!t->tuner.hasBest())
    return fail(MOE_RT_UNAVAILABLE, "moe_rt_sp_tuner_best: nothing reported");
  *sp_bytes = t->tuner.bestSp();
  *iteration_time = t->tuner.bestTime();
  return ok();
}

extern "C" int moe_rt_sp_tuner_should_retune(moe_rt_sp_tuner t,
                                             double current_time,
                                             double delta) {
  return t && t->tuner.shouldRetune(current_time, delta) ? 1 : 0;
}

extern "C" moe_rt_status moe_rt_sp_tuner_reset(moe_rt_sp_tuner t) {
  if (!t)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_sp_tuner_reset: NULL tuner");
  t->tuner.reset();
  return ok();
}
