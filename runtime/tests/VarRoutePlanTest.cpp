//===- VarRoutePlanTest.cpp - dropless routing's shared bookkeeping -------===//
//
// src/VarRoutePlan.h, which the CPU and the CUDA dropless ops both plan
// with: rows from the gathered counts, the over-bound message, rows per
// rank both ways and the all-to-all-v plans, on a case worked by hand.
//
//===----------------------------------------------------------------------===//

#include "../src/VarRoutePlan.h"
#include "../src/kernels/VarRouting.h"

#include <gtest/gtest.h>

#include <vector>

using namespace moe_rt;
namespace vp = moe_rt::varplan;

namespace {

/// G = 2 ranks, E = 4 experts (E_l = 2), this is rank 1, T = 3 tokens with
/// k = 2 choices, M = 3, bound R = 5, block 7. Every rank's counts (G x E):
///   rank 0: 1 0 3 2   (6 = T k pairs)
///   rank 1: 0 2 1 3
/// Rank 1 holds experts 2 and 3: expert 2 gets 3 + 1 rows, expert 3 2 + 3.
VarRouteShape shape() {
  VarRouteShape r;
  r.T = 3;
  r.k = 2;
  r.E = 4;
  r.G = 2;
  r.El = 2;
  r.R = 5;
  r.M = 3;
  r.rank = 1;
  r.block = 7;
  return r;
}
const std::vector<int64_t> kAll = {1, 0, 3, 2, 0, 2, 1, 3};

TEST(VarRoutePlan, RowsComeFromEveryRanksCountsOfTheLocalExperts) {
  VarRouteShape r = shape();
  std::vector<int64_t> rows(r.El * r.G, -1);
  vp::rowsFromCounts(r, kAll.data(), rows.data());
  // rows[l][g]: expert 2 from ranks 0, 1; expert 3 from ranks 0, 1.
  EXPECT_EQ(rows, (std::vector<int64_t>{3, 1, 2, 3}));
  EXPECT_EQ(vp::filledRows(r.G, 0, rows.data()), 4);
  EXPECT_EQ(vp::filledRows(r.G, 1, rows.data()), 5);
  r.rank = 0;
  vp::rowsFromCounts(r, kAll.data(), rows.data());
  EXPECT_EQ(rows, (std::vector<int64_t>{1, 0, 0, 2}));
}

TEST(VarRoutePlan, OverTheBoundNamesBlockExpertAndLoad) {
  VarRouteShape r = shape();
  EXPECT_EQ(vp::overBound(r, kAll.data()), ""); // loads 1, 2, 4, 5 <= 5
  r.R = 4; // expert 3 (5 rows) is over; expert 2 (4) is not
  std::string why = vp::overBound(r, kAll.data());
  EXPECT_NE(why.find("block 7:"), std::string::npos) << why;
  EXPECT_NE(why.find("expert 3 (local expert 1 of rank 1) receives 5 rows, "
                     "bound 4"),
            std::string::npos)
      << why;
  // The same words on every rank: the message depends on `all` only.
  VarRouteShape other = r;
  other.rank = 0;
  EXPECT_EQ(vp::overBound(other, kAll.data()), why);
  r.R = 1; // the first expert over the bound is named: expert 1 (2 rows)
  EXPECT_NE(vp::overBound(r, kAll.data())
                .find("expert 1 (local expert 1 of "
                      "rank 0) receives 2 rows"),
            std::string::npos);
}

TEST(VarRoutePlan, RowsPerRankAndPlansBothWays) {
  VarRouteShape r = shape();
  std::vector<int64_t> rows(r.El * r.G);
  vp::rowsFromCounts(r, kAll.data(), rows.data());
  vp::RankRows n;
  ASSERT_EQ(vp::rowsPerRank(r, kAll.data() + r.E, rows.data(), n), "");
  // Rank 1 sends 0 + 2 rows to rank 0's experts, 1 + 3 to its own; it
  // receives 3 + 2 from rank 0 and 1 + 3 from itself.
  EXPECT_EQ(n.toRank, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(n.fromRank, (std::vector<int64_t>{5, 4}));
  coll::PeerPlan toExperts, toTokens;
  ASSERT_EQ(vp::planExchanges(r, n, toExperts, toTokens), "");
  EXPECT_EQ(toExperts.sendCount, (std::vector<int64_t>{6, 12}));
  EXPECT_EQ(toExperts.sendOffset, (std::vector<int64_t>{0, 6}));
  EXPECT_EQ(toExperts.recvCount, (std::vector<int64_t>{15, 12}));
  EXPECT_EQ(toExperts.recvOffset, (std::vector<int64_t>{0, 15}));
  EXPECT_EQ(toTokens.sendCount, toExperts.recvCount);
  EXPECT_EQ(toTokens.recvOffset, toExperts.sendOffset);
  // Combine's expert side holds 9 rows in E_l R = 10: a bound of 4 cannot.
  r.R = 4;
  EXPECT_EQ(vp::rowsPerRank(r, kAll.data() + r.E, rows.data(), n),
            "rows of local expert 1 exceed the bound 4");
}

TEST(VarRoutePlan, CombinesVjpMovesBothWaysInOneExchange) {
  // Rank 1 of shape(): 2 + 4 token-side rows to ranks 0, 1; 5 + 4
  // expert-side rows from them. To (and from) each peer: the gradient rows
  // first, then the output rows.
  vp::RankRows n{{2, 4}, {5, 4}};
  vp::TwoWayRows t = vp::twoWayRows(n);
  EXPECT_EQ(t.perPeer, (std::vector<int64_t>{7, 8}));
  // Send buffer: [token rows 0-1 | expert rows 0-4 | token rows 2-5 |
  // expert rows 5-8]; received: [expert rows 0-4 | token rows 0-1 |
  // expert rows 5-8 | token rows 2-5].
  EXPECT_EQ(t.gradSent, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(t.outputSent, (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(t.gradReceived, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(t.outputReceived, (std::vector<int64_t>{5, 9}));
  // Both buffers: every one of the 6 + 9 rows has one place.
  int64_t tokenFirst[] = {0, 2, 6}, expertFirst[] = {0, 5, 9};
  for (auto [tokenShift, expertShift] :
       {std::pair{&t.gradSent, &t.outputSent},
        std::pair{&t.outputReceived, &t.gradReceived}}) {
    std::vector<int> used(15, 0);
    for (int p = 0; p < 2; ++p) {
      for (int64_t i = tokenFirst[p]; i < tokenFirst[p + 1]; ++i)
        ++used[i + (*tokenShift)[p]];
      for (int64_t j = expertFirst[p]; j < expertFirst[p + 1]; ++j)
        ++used[j + (*expertShift)[p]];
    }
    EXPECT_EQ(used, std::vector<int>(15, 1));
  }
}

TEST(VarRoutePlan, RowsThatDoNotMatchTheRoutingAreRefused) {
  VarRouteShape r = shape();
  // More rows announced than the token side (T k = 6) holds.
  std::vector<int64_t> mine = {4, 4, 0, 0}, rows = {0, 0, 0, 0};
  vp::RankRows n;
  ASSERT_EQ(vp::rowsPerRank(r, mine.data(), rows.data(), n), "");
  coll::PeerPlan a, b;
  EXPECT_NE(vp::planExchanges(r, n, a, b).find("do not match the rows tensor"),
            std::string::npos);
  // A negative entry is refused before any layout reads the table.
  rows = {0, -1, 0, 0};
  EXPECT_EQ(vp::firstOverBound(r.G, r.El, r.R, rows.data()), 0);
}

TEST(VarRoutePlan, ExpertRowsMustFitTheExpertBuffer) {
  std::vector<int64_t> rows = {2, 1, 0, 4}; // E_l = 2 experts, G = 2
  EXPECT_EQ(vp::expertRowsFit(2, 2, 4, rows.data()), "");
  EXPECT_EQ(vp::expertRowsFit(2, 2, 3, rows.data()),
            "rows of local expert 1 do not fit its 3 rows");
}

} // namespace

// The expert placement (moe_rt/expert_placement.h): choices become
// physical experts (rank, slot) by the slot table; a table that is not a
// permutation of the experts is refused with the block and the entries.
TEST(VarRoutePlan, ExpertPlacementMapsChoicesToPhysicalExperts) {
  VarRouteShape r = shape();
  // Rank 0 holds experts 3 and 0, rank 1 experts 2 and 1.
  const std::vector<int64_t> slots = {3, 0, 2, 1};
  r.slots = slots.data();
  const std::vector<int64_t> idx = {0, 1, 2, 3, 3, 0};
  std::vector<int64_t> out;
  EXPECT_EQ(vp::toPhysical(r, idx.data(), 6, out), "");
  EXPECT_EQ(out, (std::vector<int64_t>{1, 3, 2, 0, 0, 1}));
}

TEST(VarRoutePlan, ExpertPlacementThatIsNotAPermutationIsRefused) {
  VarRouteShape r = shape();
  std::vector<int64_t> out, idx = {0, 1};
  const std::vector<int64_t> twice = {3, 1, 2, 1};
  r.slots = twice.data();
  EXPECT_EQ(vp::toPhysical(r, idx.data(), 2, out),
            "block 7: expert placement: expert 1 is in two slots (rank 0 "
            "slot 1 and rank 1 slot 1); the table must be a permutation of "
            "the experts");
  const std::vector<int64_t> outside = {3, 0, 4, 1};
  r.slots = outside.data();
  EXPECT_EQ(vp::toPhysical(r, idx.data(), 2, out),
            "block 7: expert placement: rank 1 slot 0 holds expert 4, not "
            "one of the 4 experts");
}

// Users give expert -> rank; the table follows, each rank's experts in
// increasing order, and each bad entry is named.
TEST(VarRoutePlan, ExpertRanksBecomeTheSlotTable) {
  namespace ep = moe_rt::expert_placement;
  std::vector<int64_t> t, ranks;
  EXPECT_EQ(ep::parseList("1,0 1,0", ranks), "");
  EXPECT_EQ(ep::slotsFromRanks(ranks, 4, 2, t), "");
  EXPECT_EQ(t, (std::vector<int64_t>{1, 3, 0, 2}));
  EXPECT_EQ(ep::ranksOf(t, 2), ranks);
  EXPECT_EQ(ep::slotsFromRanks({1, 0, 1}, 4, 2, t),
            "expert placement: 3 entries, expected 4 (one rank per expert)");
  EXPECT_EQ(ep::slotsFromRanks({1, 0, 2, 0}, 4, 2, t),
            "expert placement: entry 2 (expert 2): rank 2 is not a rank of "
            "the 2-rank expert-parallel group");
  EXPECT_EQ(ep::slotsFromRanks({1, 0, 0, 0}, 4, 2, t),
            "expert placement: rank 0 holds 3 experts; every rank must hold "
            "E/G = 2");
  EXPECT_EQ(ep::parseList("1,x", ranks),
            "expert placement: 'x' (entry 1) is not a rank (a non-negative "
            "integer)");
}

// Token chunks (kernels::keepPart): T = 4 tokens, k = 2, E = 2 experts.
// Choices (token, choice) -> expert: (0,0)=0 (0,1)=1 (1,0)=0 (1,1)=1
// (2,0)=0 (2,1)=1 (3,0)=1 (3,1)=0. GShard order puts every first choice
// before any second: expert 0 gets tokens 0, 1, 2 (first) then 3 (second),
// expert 1 gets token 3 (first) then 0, 1, 2 (second): 4 rows each. Chunk
// j of 2 keeps rows [2j, 2j + 2) of each expert, repacked expert-major.
TEST(VarRoutePlan, TokenChunksPartitionEveryExpertsRows) {
  namespace k = moe_rt::kernels;
  const std::vector<int64_t> idx = {0, 1, 0, 1, 0, 1, 1, 0};
  std::vector<int> seen(8, 0);
  for (int64_t part = 0; part < 2; ++part) {
    std::vector<int64_t> counts(2), pos(8);
    k::packedRows(4, 2, 2, idx.data(), counts.data(), pos.data());
    k::keepPart(8, 2, idx.data(), part, 2, counts.data(), pos.data());
    EXPECT_EQ(counts, (std::vector<int64_t>{2, 2}));
    if (part == 0) // expert 0: tokens 0, 1; expert 1: tokens 3, 0
      EXPECT_EQ(pos, (std::vector<int64_t>{0, 3, 1, -1, -1, -1, 2, -1}));
    else // expert 0: tokens 2, 3; expert 1: tokens 1, 2
      EXPECT_EQ(pos, (std::vector<int64_t>{-1, -1, -1, 2, 0, 3, -1, 1}));
    for (int64_t i = 0; i < 8; ++i)
      seen[i] += pos[i] >= 0;
  }
  // Every (token, choice) travels in exactly one chunk.
  EXPECT_EQ(seen, std::vector<int>(8, 1));
  // Runs of unequal length: 3 rows in 2 chunks are 1 + 2; 1 row in 4
  // chunks leaves three empty.
  EXPECT_EQ(k::partRange(3, 0, 2).end, 1);
  EXPECT_EQ(k::partRange(3, 1, 2).first, 1);
  EXPECT_EQ(k::partRange(1, 2, 4).end - k::partRange(1, 2, 4).first, 0);
  EXPECT_EQ(k::partRange(1, 3, 4).end - k::partRange(1, 3, 4).first, 1);
}

namespace {

/// One counts exchange per layer (moe.exchange_counts): chunk j of r's
/// counts are cut from the exchanged whole counts exactly as each rank
/// cuts its own (kernels::partRange), and a row that is not this rank's
/// own counts (another layer's) is refused, naming the block and expert.
TEST(VarRoutePlan, ChunkCountsAreCutFromTheLayersOneExchange) {
  VarRouteShape r = shape();
  const std::vector<int64_t> mine = {0, 2, 1, 3}; // rank 1's row of kAll
  r.parts = 2;
  std::vector<int64_t> cut0(r.G * r.E, -1), cut1(r.G * r.E, -1);
  r.part = 0;
  EXPECT_EQ(vp::countsFromExchange(r, kAll.data(), mine.data(), cut0.data()),
            "");
  r.part = 1;
  EXPECT_EQ(vp::countsFromExchange(r, kAll.data(), mine.data(), cut1.data()),
            "");
  // Run [floor(j c / 2), floor((j + 1) c / 2)) of every count c.
  EXPECT_EQ(cut0, (std::vector<int64_t>{0, 0, 1, 1, 0, 1, 0, 1}));
  EXPECT_EQ(cut1, (std::vector<int64_t>{1, 0, 2, 1, 0, 1, 1, 2}));
  for (size_t i = 0; i < kAll.size(); ++i)
    EXPECT_EQ(cut0[i] + cut1[i], kAll[i]) << i;
  // Counts exchanged for other routing: rank 1's row says 2 rows to
  // expert 0, its own routing sends none.
  std::vector<int64_t> other = {1, 0, 3, 2, 2, 0, 1, 3};
  std::string why =
      vp::countsFromExchange(r, other.data(), mine.data(), cut1.data());
  EXPECT_NE(why.find("block 7: the exchanged counts (all_counts) say rank 1 "
                     "sends expert 0 2 rows, its routing sends 0"),
            std::string::npos)
      << why;
}

} // namespace
