//===- RoutingCountsTest.cpp - sums, balance and Eq. 3-4 volumes ----------===//

#include "TestSupport.h"

#include <gtest/gtest.h>

using namespace moe_rt::planning;
using namespace planning_test;

namespace {

/// NetMoE Fig. 2 (I = 4, L = 4, E = 4, K = 1, ExpDev = [0,1,2,3], 2 nodes
/// x 2 ranks). The figure itself is not in the text; these counts are the
/// ones the text pins down: sample 0 prefers expert 2, sample 3 expert 0,
/// node 0 sends 5 tokens across nodes with SmpDev = [0,1,2,3] and 2 with
/// [3,1,2,0], and (Fig. 4) swapping samples 0 and 2 inside node 1 then
/// saves one intra-node token.
CountMatrix figure2Counts() {
  CountMatrix c(4, 4);
  const uint32_t rows[4][4] = {
      {0, 1, 3, 0}, {1, 1, 1, 1}, {0, 0, 3, 1}, {3, 1, 0, 0}};
  for (int i = 0; i < 4; ++i)
    for (int e = 0; e < 4; ++e)
      c.at(i, e) = rows[i][e];
  return c;
}

} // namespace

TEST(RoutingCounts, Figure2Volumes) {
  CountMatrix c = figure2Counts();
  Grid g{2, 2};
  std::vector<int> experts = {0, 1, 2, 3};
  // Node 0's sending volume is the paper's figure: rows of its samples.
  auto nodeZeroInter = [&](const std::vector<int> &rank) {
    CountMatrix sub(0, 4);
    std::vector<int> subRank;
    for (int i = 0; i < 4; ++i)
      if (g.nodeOf(rank[i]) == 0) {
        sub.values.insert(sub.values.end(), c.row(i), c.row(i) + 4);
        ++sub.rows;
        subRank.push_back(rank[i]);
      }
    return allToAllVolume(sub, subRank, experts, g).interNode;
  };
  EXPECT_EQ(nodeZeroInter({0, 1, 2, 3}), 5u);
  EXPECT_EQ(nodeZeroInter({3, 1, 2, 0}), 2u);
  // The whole cluster, against the pairwise count of Eq. 3-4.
  for (std::vector<int> rank : {std::vector<int>{0, 1, 2, 3},
                                std::vector<int>{3, 1, 2, 0},
                                std::vector<int>{2, 1, 3, 0}}) {
    EXPECT_VOLUMES_MATCH(c, rank, experts, g);
  }
  // Fig. 4: within node 1, swapping samples 0 and 2 saves one token.
  EXPECT_EQ(allToAllVolume(c, {3, 1, 2, 0}, experts, g).intraNode -
                allToAllVolume(c, {2, 1, 3, 0}, experts, g).intraNode,
            1u);
}

TEST(RoutingCounts, RankSumsAndBalance) {
  CountMatrix c = figure2Counts();
  CountMatrix perRank = rankExpertCounts(c, {1, 0, 1, 0}, 2);
  ASSERT_EQ(perRank.rows, 2);
  // Rank 0 holds samples 1 and 3, rank 1 samples 0 and 2.
  EXPECT_EQ(std::vector<uint32_t>(perRank.row(0), perRank.row(0) + 4),
            (std::vector<uint32_t>{4, 2, 1, 1}));
  EXPECT_EQ(std::vector<uint32_t>(perRank.row(1), perRank.row(1) + 4),
            (std::vector<uint32_t>{0, 1, 6, 1}));
  // Experts receive 4, 3, 7, 2 tokens; ranks (experts 0,1 | 2,3) 7 and 9.
  LoadBalance b = loadBalance(c, {0, 0, 1, 1}, 2);
  EXPECT_EQ(b.maxExpertTokens, 7u);
  EXPECT_DOUBLE_EQ(b.meanExpertTokens, 4.0);
  EXPECT_DOUBLE_EQ(b.expertRatio(), 7.0 / 4.0);
  EXPECT_EQ(b.maxRankTokens, 9u);
  EXPECT_DOUBLE_EQ(b.rankRatio(), 9.0 / 8.0);
}

TEST(RoutingCounts, VolumesPartitionTheTokens) {
  std::mt19937_64 rng(3);
  Grid g{3, 4};
  for (int trial = 0; trial < 20; ++trial) {
    CountMatrix c = randomCounts(24, 24, 16, 2, rng);
    std::vector<int> rank(24), experts(24);
    for (int i = 0; i < 24; ++i) {
      rank[i] = int(rng() % 12);
      experts[i] = int(rng() % 12);
    }
    EXPECT_VOLUMES_MATCH(c, rank, experts, g);
  }
}

TEST(RoutingCounts, ContiguousPlacement) {
  EXPECT_EQ(contiguousPlacement(8, 4),
            (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
}
