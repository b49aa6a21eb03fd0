//===- RoutingPredictor.cpp - the next block's counts, per sample ---------===//

#include "moe_rt/routing_predictor.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moe_rt {
namespace planning {

namespace {

/// One step's transition: co-occurrence of a sample's tokens on e (block l)
/// with its share of tokens on e' (block l+1), rows normalised. A row with
/// no tokens falls back to block l+1's overall frequencies.
std::vector<double> stepTransition(const CountMatrix &cur,
                                   const CountMatrix &next) {
  int from = cur.experts, to = next.experts;
  std::vector<double> t(size_t(from) * to, 0.0), overall(to, 0.0);
  for (int i = 0; i < cur.rows; ++i) {
    double nextSum = double(next.rowSum(i));
    if (nextSum == 0)
      continue;
    const uint32_t *n = next.row(i);
    for (int f = 0; f < to; ++f)
      overall[f] += n[f];
    for (int e = 0; e < from; ++e) {
      double weight = cur.at(i, e) / nextSum;
      if (weight == 0)
        continue;
      double *row = t.data() + size_t(e) * to;
      for (int f = 0; f < to; ++f)
        row[f] += weight * n[f];
    }
  }
  double all = std::accumulate(overall.begin(), overall.end(), 0.0);
  for (int e = 0; e < from; ++e) {
    double *row = t.data() + size_t(e) * to;
    double sum = std::accumulate(row, row + to, 0.0);
    for (int f = 0; f < to; ++f)
      row[f] = sum > 0 ? row[f] / sum
                       : (all > 0 ? overall[f] / all : 1.0 / to);
  }
  return t;
}

/// Rounds `want` (summing to `total`) to integers with the same sum:
/// floors, then one more to the largest remainders (ties to lower index,
/// so every rank that predicts computes the same counts).
void roundRow(const std::vector<double> &want, uint64_t total,
              uint32_t *out) {
  size_t n = want.size();
  std::vector<size_t> order(n);
  uint64_t given = 0;
  for (size_t k = 0; k < n; ++k) {
    out[k] = uint32_t(std::floor(want[k]));
    given += out[k];
    order[k] = k;
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return want[a] - std::floor(want[a]) > want[b] - std::floor(want[b]);
  });
  for (size_t k = 0; given < total && k < n; ++k, ++given)
    ++out[order[k]];
}

} // namespace

void NextBlockPredictor::observe(int block, const CountMatrix &cur,
                                 const CountMatrix &next) {
  if (cur.rows != next.rows || cur.experts < 1 || next.experts < 1)
    return;
  std::vector<double> t = stepTransition(cur, next);
  auto it = transitions.find(block);
  if (it == transitions.end() || it->second.from != cur.experts ||
      it->second.to != next.experts) {
    transitions[block] = Transition{cur.experts, next.experts, std::move(t)};
    return;
  }
  std::vector<double> &avg = it->second.share;
  for (size_t k = 0; k < avg.size(); ++k)
    avg[k] = (1 - decay) * avg[k] + decay * t[k];
}

bool NextBlockPredictor::predict(int block, const CountMatrix &cur,
                                 uint64_t nextRowSum, CountMatrix &out) const {
  auto it = transitions.find(block);
  if (it == transitions.end() || it->second.from != cur.experts)
    return false;
  const Transition &t = it->second;
  out = CountMatrix(cur.rows, t.to);
  std::vector<double> want(t.to);
  for (int i = 0; i < cur.rows; ++i) {
    std::fill(want.begin(), want.end(), 0.0);
    double sum = double(cur.rowSum(i));
    if (sum == 0)
      continue;
    double scale = double(nextRowSum) / sum;
    for (int e = 0; e < cur.experts; ++e) {
      double w = cur.at(i, e) * scale;
      if (w == 0)
        continue;
      const double *row = t.share.data() + size_t(e) * t.to;
      for (int f = 0; f < t.to; ++f)
        want[f] += w * row[f];
    }
    roundRow(want, nextRowSum, out.values.data() + size_t(i) * t.to);
  }
  return true;
}

double predictionError(const CountMatrix &predicted,
                       const CountMatrix &actual) {
  if (predicted.rows != actual.rows || predicted.experts != actual.experts)
    return std::nan("");
  double diff = 0, total = 0;
  for (size_t k = 0; k < actual.values.size(); ++k) {
    diff += std::fabs(double(predicted.values[k]) - double(actual.values[k]));
    total += actual.values[k];
  }
  return total > 0 ? diff / total : 0.0;
}

} // namespace planning
} // namespace moe_rt
