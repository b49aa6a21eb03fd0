//===- DifferentialEvolution.h - pagmo2's DE behind a plain API -*- C++ -*-===//
//
// FSMoE §5.3 solves its gradient partition "with differential evolution"
// (Price, 2013); this is pagmo2's `de` (Debian libpagmo-dev). pagmo reports
// errors by throwing and needs RTTI, which the LLVM-style compiler build
// disables, so only DifferentialEvolution.cpp sees pagmo: it is compiled
// with exceptions and RTTI on and turns every exception into an empty
// result. Nothing of pagmo crosses this header.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_DIFFERENTIALEVOLUTION_H
#define MOE_ANALYSIS_DIFFERENTIALEVOLUTION_H

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mlir::moe {

struct EvolutionOptions {
  unsigned population = 16, generations = 60;
  unsigned seed = 1; // runs are deterministic for a seed
};

struct EvolutionResult {
  std::vector<double> x;
  double value = 0;
};

/// Minimises `objective` over the box [lower, upper] (same sizes, lower <=
/// upper). Returns the best point found, or the reason it could not run.
std::optional<EvolutionResult>
minimizeByDifferentialEvolution(
    const std::function<double(const std::vector<double> &)> &objective,
    const std::vector<double> &lower, const std::vector<double> &upper,
    const EvolutionOptions &options, std::string &error);

} // namespace mlir::moe

#endif // MOE_ANALYSIS_DIFFERENTIALEVOLUTION_H
