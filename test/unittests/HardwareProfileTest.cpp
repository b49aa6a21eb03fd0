//===- HardwareProfileTest.cpp - runtime_collective_scale by size ---------===//

#include "moe/Analysis/HardwareProfile.h"

#include <gtest/gtest.h>

using namespace mlir::moe;

namespace {

const char *kProfile = R"({
  "name": "t", "mesh": {"nodes": 1, "gpus_per_node": 2}, "launch_us": 0,
  "compute": {"gemm": {"alpha_us": 0, "beta_us_per_flop": 1},
              "memory": {"alpha_us": 0, "beta_us_per_byte": 1}},
  "collectives": {
    "all_to_all": {"intra": {"alpha_us": 0, "beta_us_per_byte": 1}},
    "all_reduce": {"intra": {"alpha_us": 0, "beta_us_per_byte": 1}},
    "all_gather": {"intra": {"alpha_us": 0, "beta_us_per_byte": 1}},
    "reduce_scatter": {"intra": {"alpha_us": 0, "beta_us_per_byte": 1}}},
  "runtime_collective_scale": {
    "all_reduce": {"bytes": [1024, 4096, 65536], "scale": [1, 2, 4]},
    "all_to_all": 0.5}
})";

// The ratio at a size: the measured one at a measured size, linear in
// log2(bytes) between two (2048 B is halfway from 1024 to 4096; 16384 B
// halfway from 4096 to 65536), the nearest beyond them; a kind not listed
// is 1; a number holds for every size.
TEST(HardwareProfile, RuntimeScaleInterpolatesInLogBytes) {
  auto p = HardwareProfile::parse(kProfile, "test");
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  EXPECT_DOUBLE_EQ(p->runtimeScaleOf(CollectiveKind::AllReduce, 1024), 1);
  EXPECT_DOUBLE_EQ(p->runtimeScaleOf(CollectiveKind::AllReduce, 2048), 1.5);
  EXPECT_DOUBLE_EQ(p->runtimeScaleOf(CollectiveKind::AllReduce, 4096), 2);
  EXPECT_DOUBLE_EQ(p->runtimeScaleOf(CollectiveKind::AllReduce, 16384), 3);
  EXPECT_DOUBLE_EQ(p->runtimeScaleOf(CollectiveKind::AllReduce, 10), 1);
  EXPECT_DOUBLE_EQ(p->runtimeScaleOf(CollectiveKind::AllReduce, 1 << 30), 4);
  EXPECT_DOUBLE_EQ(p->runtimeScaleOf(CollectiveKind::AllToAll, 7), 0.5);
  EXPECT_DOUBLE_EQ(p->runtimeScaleOf(CollectiveKind::AllToAll, 1 << 20), 0.5);
  EXPECT_DOUBLE_EQ(p->runtimeScaleOf(CollectiveKind::AllGather, 4096), 1);
}

// toJson writes what parse reads back to the same ratios.
TEST(HardwareProfile, RuntimeScaleRoundTrips) {
  auto p = HardwareProfile::parse(kProfile, "test");
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  auto q = HardwareProfile::parse(p->toJson(), "round trip");
  ASSERT_TRUE(static_cast<bool>(q)) << llvm::toString(q.takeError());
  for (double bytes : {10.0, 1024.0, 3000.0, 16384.0, 1e9})
    for (CollectiveKind kind :
         {CollectiveKind::AllToAll, CollectiveKind::AllReduce,
          CollectiveKind::AllGather, CollectiveKind::ReduceScatter})
      EXPECT_DOUBLE_EQ(q->runtimeScaleOf(kind, bytes),
                       p->runtimeScaleOf(kind, bytes));
}

// comm_stretch_partial: absent, the partial stretch is comm_stretch; given,
// itself; toJson writes it only when given, and parse reads it back.
TEST(HardwareProfile, PartialStretchDefaultsToTheStretchAndRoundTrips) {
  std::string text = kProfile;
  text.insert(text.find("\"launch_us\""), "\"comm_stretch\": 1.5, ");
  auto p = HardwareProfile::parse(text, "test");
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  EXPECT_DOUBLE_EQ(p->partialStretch(), 1.5);
  EXPECT_EQ(p->toJson().find("comm_stretch_partial"), std::string::npos);
  text.insert(text.find("\"launch_us\""), "\"comm_stretch_partial\": 1.25, ");
  auto q = HardwareProfile::parse(text, "test");
  ASSERT_TRUE(static_cast<bool>(q)) << llvm::toString(q.takeError());
  EXPECT_DOUBLE_EQ(q->partialStretch(), 1.25);
  auto r = HardwareProfile::parse(q->toJson(), "round trip");
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_DOUBLE_EQ(r->partialStretch(), 1.25);
  EXPECT_DOUBLE_EQ(r->commStretch, 1.5);
}

} // namespace
