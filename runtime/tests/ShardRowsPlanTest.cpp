//===- ShardRowsPlanTest.cpp - expert sharding's variable-count layouts ---===//
//
// src/ShardRowsPlan.h on a case worked by hand: S = 2 ranks of a node, E_l
// = 2 local experts, G = 2 count columns, bound R = 4, M = 1. Counts:
//   rank 0: expert 0: 1 + 1 = 2 rows, expert 1: 0 + 1 = 1 row
//   rank 1: expert 0: 1 + 0 = 1 row,  expert 1: 2 + 1 = 3 rows
// so gathered expert 0 = [r0 r0 r1 -], expert 1 = [r0 r1 r1 r1].
//
//===----------------------------------------------------------------------===//

#include "../src/ShardRowsPlan.h"

#include <gtest/gtest.h>

#include <vector>

using namespace moe_rt;
namespace sr = moe_rt::shardrows;

namespace {

sr::Shape shape(int64_t rank) {
  sr::Shape s;
  s.S = 2;
  s.rank = rank;
  s.El = 2;
  s.G = 2;
  s.R = 4;
  s.M = 1;
  s.block = 3;
  return s;
}

// S x E_l x G, rank-major: what the counts all-gather returns.
const std::vector<int64_t> kAll = {1, 1, 0, 1, /*rank 1*/ 1, 0, 2, 1};

TEST(ShardRowsPlan, RunsAndWire) {
  std::vector<int64_t> n, count, offset;
  ASSERT_EQ(sr::runs(shape(0), kAll.data(), n), "");
  EXPECT_EQ(n, (std::vector<int64_t>{2, 1, 1, 3}));
  sr::wire(shape(0), n, count, offset);
  EXPECT_EQ(count, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(offset, (std::vector<int64_t>{0, 3}));
  std::vector<int64_t> grows(8);
  sr::gatheredRows(shape(0), kAll.data(), grows.data());
  EXPECT_EQ(grows, (std::vector<int64_t>{1, 1, 1, 0, 0, 1, 2, 1}));
  std::vector<int64_t> mine(4);
  sr::ownRows(shape(1), grows.data(), mine.data());
  EXPECT_EQ(mine, (std::vector<int64_t>{1, 0, 2, 1}));
  EXPECT_EQ(sr::sameCounts(shape(1), grows.data(), kAll.data()), "");
}

// Rank 0's rows 10, 11 (expert 0), 20 (expert 1); rank 1's 30 (expert 0),
// 40, 41, 42 (expert 1): the wire and the gathered layout, and back.
TEST(ShardRowsPlan, GatherAndScatterLayouts) {
  std::vector<int64_t> n, count, offset;
  ASSERT_EQ(sr::runs(shape(0), kAll.data(), n), "");
  sr::wire(shape(0), n, count, offset);
  std::vector<float> x0 = {10, 11, 0, 0, 20, 0, 0, 0};
  std::vector<float> x1 = {30, 0, 0, 0, 40, 41, 42, 0};
  std::vector<float> wire(7);
  sr::copyRuns(shape(0), n, 0, false, true, x0.data(), wire.data());
  sr::copyRuns(shape(1), n, 1, false, true, x1.data(), wire.data() + 3);
  EXPECT_EQ(wire, (std::vector<float>{10, 11, 20, 30, 40, 41, 42}));
  std::vector<float> gathered(8, -1);
  for (int64_t g = 0; g < 2; ++g)
    sr::copyRuns(shape(0), n, g, true, false, gathered.data(),
                 wire.data() + offset[g]);
  sr::zeroTail(shape(0), sr::filled(shape(0), n, true), gathered.data());
  EXPECT_EQ(gathered, (std::vector<float>{10, 11, 30, 0, 20, 40, 41, 42}));
  // The reduce-scatter's send side is the same wire; rank 1 gets its runs
  // back in its own layout.
  std::vector<float> back(7);
  for (int64_t g = 0; g < 2; ++g)
    sr::copyRuns(shape(0), n, g, true, true, gathered.data(),
                 back.data() + offset[g]);
  EXPECT_EQ(back, wire);
  std::vector<float> own(8, -1);
  sr::copyRuns(shape(1), n, 1, false, false, own.data(), back.data() + 3);
  sr::zeroTail(shape(1), sr::filled(shape(1), n, false), own.data());
  EXPECT_EQ(own, x1);
}

TEST(ShardRowsPlan, RefusesOverBoundNegativeAndMismatch) {
  std::vector<int64_t> n;
  sr::Shape s = shape(0);
  s.R = 3; // expert 1 receives 1 + 3 = 4 rows
  EXPECT_EQ(sr::runs(s, kAll.data(), n),
            "block 3: the node's rows over the bound: local expert 1 "
            "receives 4 rows from the group's 2 ranks, bound 3 (raise it: "
            "moe-flowmoe-pipeline dropless-bound=N)");
  std::vector<int64_t> negative = kAll;
  negative[5] = -1;
  EXPECT_EQ(sr::runs(shape(0), negative.data(), n),
            "block 3: rank 1 of the group has a negative count -1 (local "
            "expert 0, column 1)");
  std::vector<int64_t> grows(8);
  sr::gatheredRows(shape(0), kAll.data(), grows.data());
  grows[6] = 5; // [1][2]: rank 1's first column of expert 1
  EXPECT_EQ(sr::sameCounts(shape(0), grows.data(), kAll.data()),
            "block 3: the gathered counts do not match the group's: entry "
            "[1][2] is 5, rank 1 has 2");
}

} // namespace
