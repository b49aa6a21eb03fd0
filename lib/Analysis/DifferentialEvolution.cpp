//===- DifferentialEvolution.cpp - pagmo2's DE behind a plain API ---------===//
//
// Compiled with -fexceptions -frtti (lib/Analysis/CMakeLists.txt); see the
// header for why.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/DifferentialEvolution.h"

#include <pagmo/algorithm.hpp>
#include <pagmo/algorithms/de.hpp>
#include <pagmo/population.hpp>
#include <pagmo/problem.hpp>

#include <exception>

namespace {

/// A pagmo user-defined problem over a borrowed objective.
struct BoxProblem {
  const std::function<double(const std::vector<double> &)> *objective =
      nullptr;
  std::vector<double> lower, upper;

  pagmo::vector_double fitness(const pagmo::vector_double &x) const {
    return {(*objective)(x)};
  }
  std::pair<pagmo::vector_double, pagmo::vector_double> get_bounds() const {
    return {lower, upper};
  }
};

} // namespace

std::optional<mlir::moe::EvolutionResult>
mlir::moe::minimizeByDifferentialEvolution(
    const std::function<double(const std::vector<double> &)> &objective,
    const std::vector<double> &lower, const std::vector<double> &upper,
    const EvolutionOptions &options, std::string &error) {
  try {
    pagmo::problem problem{BoxProblem{&objective, lower, upper}};
    // pagmo's de needs at least 5 individuals. best/1/bin with CR = 0.7 is
    // scipy's default strategy, which FSMoE's code calls.
    pagmo::population population{problem,
                                 std::max(5u, options.population),
                                 options.seed};
    pagmo::algorithm algorithm{pagmo::de(options.generations, 0.8, 0.7, 6u,
                                         1e-9, 1e-9, options.seed)};
    population = algorithm.evolve(population);
    return EvolutionResult{population.champion_x(),
                           population.champion_f()[0]};
  } catch (const std::exception &e) {
    error = e.what();
  } catch (...) {
    error = "unknown error in pagmo";
  }
  return std::nullopt;
}
