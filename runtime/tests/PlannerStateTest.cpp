//===- PlannerStateTest.cpp - NetMoE's planner keeps its predictor --------===//
//
// moe_rt_plan_placement on a CPU stream, two "steps" of a 2-block model on
// 2 nodes x 1 rank, 4 samples, 4 experts per block (2 per rank). Samples
// 0, 1 (kind A) lean to node 0 in block 0 (5 tokens there, 3 on node 1)
// and send all 8 to node 1 in block 1; samples 2, 3 (kind B) the mirror.
// Planning the gather only keeps A on node 0; once the planner has learned
// block 0 -> 1 (first step), pricing the predicted next dispatch moves A
// to node 1 (inter-node tokens 5 + 0 there, against 3 + 8 on node 0), and
// the prediction, moved by that placement, is exact.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/ops.h"

#include "TestTensor.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using moe_rt_test::Tensor;

// Rows: samples; columns: experts 0, 1 (rank 0, node 0), 2, 3 (node 1).
const std::vector<int64_t> kBlock0 = {5, 0, 3, 0,  5, 0, 3, 0,
                                      0, 3, 0, 5,  0, 3, 0, 5};
const std::vector<int64_t> kBlock1AB = {0, 0, 8, 0,  0, 0, 8, 0,
                                        8, 0, 0, 0,  8, 0, 0, 0};
const std::vector<int64_t> kBlock1BA = {8, 0, 0, 0,  8, 0, 0, 0,
                                        0, 0, 8, 0,  0, 0, 8, 0};

struct PlannerStateTest : moe_rt_test::CpuStreamTest {
  /// One planner call (block ids of their own: the state is per process).
  std::vector<int64_t> plan(int64_t block, int64_t mode,
                            const std::vector<int64_t> &counts) {
    Tensor c({4, 4}, MOE_RT_I64), p({4}, MOE_RT_I64);
    std::copy(counts.begin(), counts.end(), c.i());
    EXPECT_EQ(moe_rt_plan_placement(s, 4, 2, 1, 100 + block, 0, mode, &c, &p),
              MOE_RT_OK)
        << moe_rt_last_error();
    // A host planner solves inline on its stream: synchronising the
    // stream joins it.
    EXPECT_EQ(sync(), MOE_RT_OK);
    return std::vector<int64_t>(p.i(), p.i() + 4);
  }
};

TEST_F(PlannerStateTest, PredictedNextDispatchChangesThePlan) {
  moe_rt_placement_report(); // earlier tests' scores
  using V = std::vector<int64_t>;
  // Step 1: nothing learned yet, so both modes price the gather only.
  EXPECT_EQ(plan(0, 0, kBlock0), (V{0, 0, 1, 1}));
  EXPECT_EQ(plan(1, 0, kBlock1AB), (V{1, 1, 0, 0}));
  EXPECT_STREQ(moe_rt_placement_report(), "") << "nothing predicted yet";
  // Step 2, the same routing.
  EXPECT_EQ(plan(0, 2, kBlock0), (V{0, 0, 1, 1})) << "gather only";
  EXPECT_EQ(plan(0, 0, kBlock0), (V{1, 1, 0, 0}))
      << "the predicted next dispatch outweighs the gather";
  // Block 1 sees the samples in their new order (B, B, A, A).
  plan(1, 0, kBlock1BA);
  EXPECT_EQ(std::string(moe_rt_placement_report()),
            "netmoe: next-block prediction error 0.000 over 1 block(s) "
            "(sum |predicted - true| / sum true)");
}

TEST_F(PlannerStateTest, RefusesAnUnknownMode) {
  Tensor c({4, 4}, MOE_RT_I64), p({4}, MOE_RT_I64);
  EXPECT_EQ(moe_rt_plan_placement(s, 4, 2, 1, 0, 0, 3, &c, &p),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_rt_last_error()).find("mode"), std::string::npos)
      << moe_rt_last_error();
}

} // namespace
