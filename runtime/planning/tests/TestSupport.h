//===- TestSupport.h - brute force and independent objectives ---*- C++ -*-===//
//
// What the planning tests compare against: every balanced assignment of a
// small instance, and NetMoE's Eq. 3-4 volumes counted pair by pair
// straight from the definition (not through the library's Eq. 8 costs).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_PLANNING_TESTSUPPORT_H
#define MOE_PLANNING_TESTSUPPORT_H

#include "moe_rt/routing_counts.h"
#include "moe_rt/synthetic_routing.h"

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace planning_test {

using moe_rt::planning::CountMatrix;
using moe_rt::planning::Grid;

/// Calls `visit` with every assignment of `items` items to bins, bin b
/// taking exactly capacity[b] items.
inline void forEachBalanced(int items, const std::vector<int> &capacity,
                            const std::function<void(const std::vector<int> &)>
                                &visit) {
  std::vector<int> left = capacity, assignment(items, -1);
  std::function<void(int)> place = [&](int i) {
    if (i == items) {
      visit(assignment);
      return;
    }
    for (size_t b = 0; b < left.size(); ++b)
      if (left[b] > 0) {
        --left[b];
        assignment[i] = int(b);
        place(i + 1);
        ++left[b];
      }
  };
  place(0);
}

/// Tokens crossing nodes (inter) or crossing ranks within a node (intra)
/// when sample i sits on rank[i], counted over (i, e) pairs: Eq. 3-4.
inline void volumes(const CountMatrix &num, const std::vector<int> &rank,
                    const std::vector<int> &expertRank, const Grid &g,
                    int64_t &inter, int64_t &intra) {
  inter = intra = 0;
  for (int i = 0; i < num.rows; ++i)
    for (int e = 0; e < num.experts; ++e) {
      int sNode = rank[i] / g.ranksPerNode;
      int eNode = expertRank[e] / g.ranksPerNode;
      if (sNode != eNode)
        inter += num.at(i, e);
      else if (rank[i] != expertRank[e])
        intra += num.at(i, e);
    }
}

/// The library's Eq. 3-4 volumes agree with the pairwise count, and the
/// three shares partition the tokens.
#define EXPECT_VOLUMES_MATCH(counts, rank, experts, grid)                      \
  do {                                                                         \
    moe_rt::planning::AllToAllVolume v_ =                                      \
        moe_rt::planning::allToAllVolume(counts, rank, experts, grid);         \
    int64_t inter_, intra_;                                                    \
    planning_test::volumes(counts, rank, experts, grid, inter_, intra_);       \
    EXPECT_EQ(int64_t(v_.interNode), inter_);                                  \
    EXPECT_EQ(int64_t(v_.intraNode), intra_);                                  \
    EXPECT_EQ(v_.local + v_.intraNode + v_.interNode, (counts).total());       \
  } while (0)

/// Every record the generator writes for `config`, in trace order.
inline std::vector<moe_rt::planning::TraceRecord>
generated(const moe_rt::planning::SyntheticRouting &config) {
  std::vector<moe_rt::planning::TraceRecord> out;
  std::string e = moe_rt::planning::generateSyntheticRouting(
      config, [&](const moe_rt::planning::TraceRecord &r) {
        out.push_back(r);
        return true;
      });
  if (!e.empty())
    out.clear(); // callers check the count they expect
  return out;
}

/// Random counts: each of `tokens` tokens of a sample picks `k` distinct
/// experts, favouring a per-sample expert (so placement matters).
inline CountMatrix randomCounts(int samples, int experts, int tokens, int k,
                                std::mt19937_64 &rng) {
  CountMatrix c(samples, experts);
  for (int i = 0; i < samples; ++i) {
    int favourite = int(rng() % experts);
    for (int t = 0; t < tokens; ++t) {
      std::vector<bool> used(experts, false);
      for (int j = 0; j < k; ++j) {
        int e;
        do
          e = rng() % 2 ? favourite : int(rng() % experts);
        while (used[e]);
        used[e] = true;
        ++c.at(i, e);
      }
    }
  }
  return c;
}

} // namespace planning_test

#endif // MOE_PLANNING_TESTSUPPORT_H
