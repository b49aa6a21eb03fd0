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

} // namespace moe_profile

#endif // MOE_TOOLS_MOEPROFILE_ALPHABETAFIT_H
