//===- AssignmentTest.cpp - balanced assignments against brute force ------===//

#include "TestSupport.h"

#include "moe_rt/sample_placement.h"

#include <algorithm>
#include <gtest/gtest.h>
#include <numeric>

using namespace moe_rt::planning;
using namespace planning_test;

namespace {

int64_t objective(const std::vector<int64_t> &cost, int bins,
                  const std::vector<int> &assignment) {
  int64_t s = 0;
  for (size_t i = 0; i < assignment.size(); ++i)
    s += cost[i * bins + assignment[i]];
  return s;
}

void expectBalanced(const std::vector<int> &assignment,
                    const std::vector<int> &capacity) {
  std::vector<int> held(capacity.size(), 0);
  for (int b : assignment) {
    ASSERT_GE(b, 0);
    ASSERT_LT(b, int(capacity.size()));
    ++held[b];
  }
  EXPECT_EQ(held, capacity);
}

} // namespace

// Every balanced assignment of small random instances: both forms reach
// the brute-force minimum.
TEST(Assignment, MatchesBruteForce) {
  std::mt19937_64 rng(7);
  struct Shape {
    int items;
    std::vector<int> capacity;
  };
  std::vector<Shape> shapes = {{4, {2, 2}},    {6, {2, 2, 2}}, {6, {3, 3}},
                               {8, {2, 2, 2, 2}}, {8, {4, 4}},  {7, {3, 1, 3}},
                               {5, {0, 5}},    {1, {1}}};
  for (const Shape &s : shapes)
    for (int trial = 0; trial < 20; ++trial) {
      int bins = int(s.capacity.size());
      std::vector<int64_t> cost(size_t(s.items) * bins);
      for (int64_t &c : cost)
        c = int64_t(rng() % 50) - (trial % 3 == 0 ? 10 : 0);
      int64_t best = INT64_MAX;
      forEachBalanced(s.items, s.capacity, [&](const std::vector<int> &a) {
        best = std::min(best, objective(cost, bins, a));
      });
      std::vector<int> a, b;
      ASSERT_EQ(solveBalancedAssignment(cost, s.items, bins, s.capacity, a),
                "");
      ASSERT_EQ(solveExpandedAssignment(cost, s.items, bins, s.capacity, b),
                "");
      expectBalanced(a, s.capacity);
      expectBalanced(b, s.capacity);
      EXPECT_EQ(objective(cost, bins, a), best)
          << s.items << " items, trial " << trial;
      EXPECT_EQ(objective(cost, bins, b), best)
          << s.items << " items, trial " << trial;
    }
}

// Two bins (NetMoE's N = 2): sorting by c_{i,0} - c_{i,1} and giving the
// first half to bin 0 is optimal (an exchange argument); the solver must
// reach the same objective on instances too big to enumerate.
TEST(Assignment, TwoBinsMatchSorting) {
  std::mt19937_64 rng(11);
  for (int items : {2, 10, 64, 256, 1000}) {
    std::vector<int64_t> cost(size_t(items) * 2);
    for (int64_t &c : cost)
      c = int64_t(rng() % 2048);
    std::vector<int> order(items);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int x, int y) {
      return cost[2 * x] - cost[2 * x + 1] < cost[2 * y] - cost[2 * y + 1];
    });
    std::vector<int> sorted(items);
    for (int k = 0; k < items; ++k)
      sorted[order[k]] = k < items / 2 ? 0 : 1;
    std::vector<int> capacity = {items / 2, items - items / 2}, a;
    ASSERT_EQ(solveBalancedAssignment(cost, items, 2, capacity, a), "");
    expectBalanced(a, capacity);
    EXPECT_EQ(objective(cost, 2, a), objective(cost, 2, sorted)) << items;
  }
}

TEST(Assignment, RefusesInconsistentArguments) {
  std::vector<int> a;
  EXPECT_NE(solveBalancedAssignment({1, 2, 3}, 2, 2, {1, 1}, a)
                .find("expected items x bins = 4"),
            std::string::npos);
  EXPECT_NE(solveBalancedAssignment({1, 2, 3, 4}, 2, 2, {1, 2}, a)
                .find("hold 3 items in all, not 2"),
            std::string::npos);
  EXPECT_NE(solveExpandedAssignment({1, 2, 3, 4}, 2, 2, {1}, a)
                .find("capacity holds 1 values for 2 bins"),
            std::string::npos);
  EXPECT_NE(solveBalancedAssignment({1, 2}, 2, 1, {-1}, a).find("negative"),
            std::string::npos);
}
