//===- RoutingCounts.cpp - sums, balance and volumes of a routing ---------===//

#include "moe_rt/routing_counts.h"

#include <algorithm>

namespace moe_rt {
namespace planning {

uint64_t CountMatrix::rowSum(int r) const {
  uint64_t s = 0;
  for (int e = 0; e < experts; ++e)
    s += at(r, e);
  return s;
}

uint64_t CountMatrix::total() const {
  uint64_t s = 0;
  for (uint32_t v : values)
    s += v;
  return s;
}

CountMatrix rankExpertCounts(const CountMatrix &sampleCounts,
                             const std::vector<int> &sampleRank, int ranks) {
  CountMatrix out(ranks, sampleCounts.experts);
  for (int i = 0; i < sampleCounts.rows; ++i)
    for (int e = 0; e < sampleCounts.experts; ++e)
      out.at(sampleRank[i], e) += sampleCounts.at(i, e);
  return out;
}

LoadBalance loadBalance(const CountMatrix &sampleCounts,
                        const std::vector<int> &expertRank, int ranks) {
  std::vector<uint64_t> perExpert(sampleCounts.experts, 0);
  for (int i = 0; i < sampleCounts.rows; ++i)
    for (int e = 0; e < sampleCounts.experts; ++e)
      perExpert[e] += sampleCounts.at(i, e);
  std::vector<uint64_t> perRank(ranks, 0);
  uint64_t total = 0;
  for (int e = 0; e < sampleCounts.experts; ++e) {
    perRank[expertRank[e]] += perExpert[e];
    total += perExpert[e];
  }
  LoadBalance b;
  if (!perExpert.empty())
    b.maxExpertTokens = *std::max_element(perExpert.begin(), perExpert.end());
  if (!perRank.empty())
    b.maxRankTokens = *std::max_element(perRank.begin(), perRank.end());
  b.meanExpertTokens =
      perExpert.empty() ? 0 : double(total) / double(perExpert.size());
  b.meanRankTokens = ranks > 0 ? double(total) / double(ranks) : 0;
  return b;
}

AllToAllVolume allToAllVolume(const CountMatrix &sampleCounts,
                              const std::vector<int> &sampleRank,
                              const std::vector<int> &expertRank,
                              const Grid &grid) {
  AllToAllVolume v;
  for (int i = 0; i < sampleCounts.rows; ++i) {
    int rank = sampleRank[i];
    int node = grid.nodeOf(rank);
    for (int e = 0; e < sampleCounts.experts; ++e) {
      uint32_t n = sampleCounts.at(i, e);
      if (expertRank[e] == rank)
        v.local += n;
      else if (grid.nodeOf(expertRank[e]) == node)
        v.intraNode += n;
      else
        v.interNode += n;
    }
  }
  return v;
}

std::vector<int> contiguousPlacement(int samples, int ranks) {
  std::vector<int> placement(samples);
  int perRank = samples / ranks;
  for (int i = 0; i < samples; ++i)
    placement[i] = i / perRank;
  return placement;
}

std::vector<int> expertParallelPlacement(int experts, int ranks) {
  std::vector<int> placement(experts);
  int perRank = std::max(1, experts / std::max(1, ranks));
  for (int e = 0; e < experts; ++e)
    placement[e] = e / perRank;
  return placement;
}

} // namespace planning
} // namespace moe_rt
