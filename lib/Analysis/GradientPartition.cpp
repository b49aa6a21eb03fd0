//===- GradientPartition.cpp - FSMoE adaptive gradient partitioning -------===//
//
// Slices are byte counts of one flat gradient buffer laid out in backward
// order, so any bytes produced before a window may go into its slice; the
// only constraint is causality over prefixes (the published code's "prefix
// sum of x <= prefix sum of leftovers"). Eq. 3 and 4 are read with one
// start-up per slice: a window of t_olp holds g^{-1}(t_olp) bytes.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/GradientPartition.h"

#include <algorithm>
#include <numeric>

using namespace mlir::moe;

namespace {

DegreeChoice moeLayer(const PartitionOptions &options,
                      const MoePhaseCosts &costs, double tGarUs) {
  return options.moeLayer
             ? options.moeLayer(costs, tGarUs)
             : findOptimalPipelineDegree(costs, tGarUs, options.degrees);
}

} // namespace

void mlir::moe::evaluatePartition(const std::vector<GradientWindow> &windows,
                                  const AllReduceTime &allReduce,
                                  const PartitionOptions &options,
                                  const std::vector<double> &bytes,
                                  GradientPlan &plan) {
  plan.windows.resize(windows.size());
  double produced = 0, reduced = 0, total = 0;
  for (size_t j = 0; j < windows.size(); ++j) {
    produced += windows[j].readyBytes;
    reduced += bytes[j];
    WindowPlan &w = plan.windows[j];
    w.bytes = bytes[j];
    double slice = allReduce(bytes[j]);
    if (windows[j].moe) {
      DegreeChoice c = moeLayer(options, *windows[j].moe, slice);
      w.degree = c.degree;
      w.timeUs = c.timeUs;
    } else {
      w.degree = 0;
      w.timeUs = std::max(windows[j].denseUs, slice);
    }
    total += w.timeUs;
  }
  // What rounding in the sums above leaves is not a slice.
  double tail = produced - reduced;
  plan.tailBytes = tail > 1e-9 * produced ? tail : 0.0;
  plan.predictedUs = total + allReduce(plan.tailBytes);
}

bool mlir::moe::isCausalPartition(const std::vector<GradientWindow> &windows,
                                  const std::vector<double> &bytes,
                                  double slackBytes) {
  if (bytes.size() > windows.size())
    return false;
  double produced = 0, reduced = 0;
  for (size_t j = 0; j < bytes.size(); ++j) {
    produced += windows[j].readyBytes;
    reduced += bytes[j];
    if (bytes[j] < 0 || reduced > produced + slackBytes)
      return false;
  }
  return true;
}

namespace {

/// Step 1 (Eq. 3, 4): each window takes what is pending, up to its
/// overlappable time. Returns the slices; `pending[j]` is what is left
/// after window j.
std::vector<double> greedyCarry(const std::vector<GradientWindow> &windows,
                                const AllReduceTime &allReduce,
                                const PartitionOptions &options,
                                std::vector<double> &pending) {
  std::vector<double> slices(windows.size(), 0.0);
  pending.assign(windows.size(), 0.0);
  double carry = 0;
  for (size_t j = 0; j < windows.size(); ++j) {
    const GradientWindow &w = windows[j];
    carry += w.readyBytes;
    double window = w.denseUs;
    if (w.moe) {
      // t_olp,moe at the degree Algorithm 1 picks without a slice (§5.2).
      DegreeChoice alone = moeLayer(options, *w.moe, 0.0);
      window = options.overlapWindow
                   ? options.overlapWindow(*w.moe, alone.degree)
                   : pipelineOverlapWindow(*w.moe, double(alone.degree));
    }
    double slice = allReduce(carry) <= window
                       ? carry
                       : std::min(carry, allReduce.inverse(window));
    slices[j] = slice;
    carry -= slice;
    pending[j] = carry;
  }
  return slices;
}

} // namespace

GradientPlan mlir::moe::partitionGradients(
    const std::vector<GradientWindow> &windows, const AllReduceTime &allReduce,
    const PartitionOptions &options) {
  std::vector<double> pending;
  std::vector<double> greedy =
      greedyCarry(windows, allReduce, options, pending);
  GradientPlan plan;
  evaluatePartition(windows, allReduce, options, greedy, plan);
  for (size_t j = 0; j < windows.size(); ++j)
    plan.windows[j].greedyBytes = greedy[j];
  plan.greedyUs = plan.trivialUs = plan.predictedUs;
  plan.source = GradientPlan::Source::Greedy;

  // Step 2's variables: extra bytes for each MoE window. Extra bytes in
  // window j leave the pending bytes of every later window, so the extra
  // up to j may not exceed the smallest pending amount from j on.
  std::vector<size_t> moe;
  for (size_t j = 0; j < windows.size(); ++j)
    if (windows[j].moe)
      moe.push_back(j);
  if (moe.empty() || windows.empty() || pending.back() <= 0)
    return plan;
  std::vector<double> room(windows.size());
  std::partial_sum(pending.rbegin(), pending.rend(), room.rbegin(),
                   [](double a, double b) { return std::min(a, b); });
  std::vector<double> upper;
  for (size_t j : moe)
    upper.push_back(room[j]);
  // The evolution searches a box 5% wider on each side and clips, so that
  // "none" and "all the room" are reached (pagmo resamples a mutant that
  // leaves the box uniformly inside it, which never lands on a face).
  std::vector<double> boxLower, boxUpper;
  for (double u : upper) {
    boxLower.push_back(-0.05 * u);
    boxUpper.push_back(1.05 * u);
  }

  // Any box point maps to a causal partition: each extra is clipped to the
  // room its predecessors leave.
  auto decode = [&](const std::vector<double> &x) {
    std::vector<double> bytes = greedy;
    double used = 0;
    for (size_t k = 0; k < moe.size(); ++k) {
      double extra = std::clamp(x[k], 0.0, std::max(0.0, upper[k] - used));
      bytes[moe[k]] += extra;
      used += extra;
    }
    return bytes;
  };
  auto cost = [&](const std::vector<double> &x) {
    GradientPlan scratch;
    evaluatePartition(windows, allReduce, options, decode(x), scratch);
    return scratch.predictedUs;
  };

  // The trivial assignment: every remaining byte as early as it may go.
  std::vector<double> best(upper), zero(moe.size(), 0.0);
  double bestUs = cost(best);
  plan.trivialUs = bestUs;
  GradientPlan::Source source = GradientPlan::Source::Trivial;
  if (plan.greedyUs <= bestUs) {
    best = zero;
    bestUs = plan.greedyUs;
    source = GradientPlan::Source::Greedy;
  }
  if (!options.differentialEvolution) {
    best = zero;
    source = GradientPlan::Source::Greedy;
  } else {
    std::string error;
    std::optional<EvolutionResult> de = minimizeByDifferentialEvolution(
        cost, boxLower, boxUpper, options.evolution, error);
    if (!de)
      plan.evolutionError = error;
    else if (de->value < bestUs) {
      best = de->x;
      bestUs = de->value;
      source = GradientPlan::Source::DifferentialEvolution;
    }
  }
  std::vector<double> bytes = decode(best);
  double greedyUs = plan.greedyUs, trivialUs = plan.trivialUs;
  std::string error = plan.evolutionError;
  evaluatePartition(windows, allReduce, options, bytes, plan);
  for (size_t j = 0; j < windows.size(); ++j)
    plan.windows[j].greedyBytes = greedy[j];
  plan.greedyUs = greedyUs;
  plan.trivialUs = trivialUs;
  plan.evolutionError = error;
  plan.source = source;
  return plan;
}
