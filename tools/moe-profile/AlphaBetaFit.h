//===- AlphaBetaFit.h - least-squares t = alpha + beta * n ------*- C++ -*-===//
//
// The fit FSMoE and nccl-tests style profiling use (FSMoE §4.1: "least
// squares with intercept"), with the coefficient of determination that says
// how well a linear model explains the measurements.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TOOLS_MOEPROFILE_ALPHABETAFIT_H
#define MOE_TOOLS_MOEPROFILE_ALPHABETAFIT_H

#include <vector>

namespace moe_profile {

struct Fit {
  double alpha = 0, beta = 0, r2 = 0;
  bool ok = false; // false with fewer than two distinct sizes
};

/// Least squares over (n, t) samples. A negative intercept (start-up cost
/// below measurement noise) is clamped to zero and beta refitted through
/// the origin, since a profile's alpha must not be negative.
Fit fitAlphaBeta(const std::vector<double> &n, const std::vector<double> &t);

/// Calls `sweep(scale)` with scale 1 and, while the result's `fit.ok` is
/// false, again with scale 2, 4, ... at most `retries` more times (the
/// caller multiplies its repetitions by `scale`). On a shared or
/// oversubscribed machine one preempted sample can make a small size look
/// slower than a large one; more repetitions let the median see through it.
/// Adds the number of re-measurements to `remeasured`.
template <typename Sweep>
auto sweepUntilFit(int retries, int &remeasured, Sweep sweep)
    -> decltype(sweep(1)) {
  auto m = sweep(1);
  for (int r = 0, scale = 2; r < retries && !m.fit.ok; ++r, scale *= 2) {
    ++remeasured;
    m = sweep(scale);
  }
  return m;
}

} // namespace moe_profile

#endif // MOE_TOOLS_MOEPROFILE_ALPHABETAFIT_H
