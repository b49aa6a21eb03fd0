//===- CollectivePlanTest.cpp - both collective paths' arithmetic ---------===//
//
// src/CollectivePlan.h: which communicator class and pool queue a kind
// uses, byte range -> element range, per-peer counts and offsets. The MPI
// path and the NCCL path both call these, so these values are what moves
// over either (the NCCL path itself needs a GPU to run).

#include "../src/CollectivePlan.h"

#include <gtest/gtest.h>

#include <vector>

using namespace moe_rt::coll;

namespace {

TEST(CollectivePlan, AllReducesHaveTheirOwnCommunicatorAndLowPriority) {
  EXPECT_EQ(commClassOf(AllReduce), CommClass::AllReduce);
  EXPECT_TRUE(lowPriority(AllReduce));
  for (int64_t k : {AllToAll, AllToAllV, AllGather, ReduceScatter}) {
    EXPECT_EQ(commClassOf(k), CommClass::AllToAll) << kindName(k);
    EXPECT_FALSE(lowPriority(k)) << kindName(k);
  }
  EXPECT_STREQ(kindName(ReduceScatter), "reduce_scatter");
  EXPECT_STREQ(kindName(99), "collective");
  EXPECT_STREQ(commClassName(CommClass::AllReduce), "all-reduce");
}

TEST(CollectivePlan, ByteRangeBecomesElements) {
  ElementRange r;
  ASSERT_EQ(elementRange(64, 128, 1024, 4, r), "");
  EXPECT_EQ(r.offset, 16);
  EXPECT_EQ(r.count, 32);
  // size < 0: the whole tensor, whatever the offset says.
  ASSERT_EQ(elementRange(12, -1, 400, 4, r), "");
  EXPECT_EQ(r.offset, 0);
  EXPECT_EQ(r.count, 100);
  // The last chunk may be shorter; an empty chunk at the end is allowed.
  ASSERT_EQ(elementRange(1000, 24, 1024, 4, r), "");
  EXPECT_EQ(r.offset, 250);
  EXPECT_EQ(r.count, 6);
  ASSERT_EQ(elementRange(1024, 0, 1024, 4, r), "");
  EXPECT_EQ(r.count, 0);
}

TEST(CollectivePlan, BadByteRangesAreRefusedWithTheRange) {
  ElementRange r;
  EXPECT_EQ(elementRange(2, 8, 64, 4, r),
            "range [2, 10) is not whole floats inside the tensor's 64 bytes");
  EXPECT_NE(elementRange(0, 6, 64, 4, r), "");   // not whole floats
  EXPECT_NE(elementRange(60, 8, 64, 4, r), "");  // past the end
  EXPECT_NE(elementRange(-4, 4, 64, 4, r), "");  // negative offset
  EXPECT_NE(elementRange(68, 0, 64, 4, r), "");  // offset past the end
  // No overflow when offset + size would wrap.
  EXPECT_NE(elementRange(8, INT64_MAX - 3, 64, 4, r), "");
}

TEST(CollectivePlan, EqualPartsAllToAll) {
  PeerPlan plan;
  // 8 rows of 3 over 4 ranks: 2 rows (6 floats) per peer.
  ASSERT_EQ(planAllToAll(4, 24, 8, 24, plan), "");
  EXPECT_EQ(plan.sendCount, (std::vector<int64_t>{6, 6, 6, 6}));
  EXPECT_EQ(plan.sendOffset, (std::vector<int64_t>{0, 6, 12, 18}));
  EXPECT_EQ(plan.recvCount, plan.sendCount);
  EXPECT_EQ(plan.recvOffset, plan.sendOffset);
  EXPECT_NE(planAllToAll(3, 24, 8, 24, plan).find("group size 3"),
            std::string::npos);
  EXPECT_NE(planAllToAll(4, 24, 8, 20, plan), "");
  EXPECT_NE(planAllToAll(0, 24, 8, 24, plan), "");
}

TEST(CollectivePlan, VariableRowsAllToAllV) {
  PeerPlan plan;
  // 3 ranks, rows of 2 floats; send 1, 0, 3 rows; receive 2, 2, 1 rows.
  const int64_t send[] = {1, 0, 3}, recv[] = {2, 2, 1};
  ASSERT_EQ(planAllToAllV(3, send, recv, 2, 4, 2, 6, plan), "");
  EXPECT_EQ(plan.sendCount, (std::vector<int64_t>{2, 0, 6}));
  EXPECT_EQ(plan.sendOffset, (std::vector<int64_t>{0, 2, 2}));
  EXPECT_EQ(plan.recvCount, (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(plan.recvOffset, (std::vector<int64_t>{0, 4, 8}));
  EXPECT_TRUE(fitsInt(plan));
}

TEST(CollectivePlan, AllToAllVRefusals) {
  PeerPlan plan;
  const int64_t ok[] = {1, 1}, negative[] = {1, -1}, many[] = {3, 3};
  EXPECT_EQ(planAllToAllV(2, negative, ok, 2, 4, 2, 4, plan),
            "negative row count");
  // More rows than the send tensor holds.
  EXPECT_EQ(planAllToAllV(2, many, ok, 2, 4, 2, 4, plan),
            "row counts exceed the tensors or row sizes differ");
  // Row sizes differ.
  EXPECT_NE(planAllToAllV(2, ok, ok, 2, 4, 3, 4, plan), "");
  // Huge counts stop before their sums overflow.
  const int64_t huge[] = {INT64_MAX / 2, INT64_MAX / 2};
  EXPECT_NE(planAllToAllV(2, huge, ok, 1, 4, 1, 4, plan), "");
}

TEST(CollectivePlan, MpiIntLimit) {
  PeerPlan plan;
  plan.sendCount = {int64_t(1) << 31};
  plan.sendOffset = {0};
  plan.recvCount = {0};
  plan.recvOffset = {0};
  EXPECT_FALSE(fitsInt(plan));
  plan.sendCount = {(int64_t(1) << 31) - 1};
  EXPECT_TRUE(fitsInt(plan));
}

TEST(CollectivePlan, PeerMustBeAnotherRankOfTheGroup) {
  EXPECT_EQ(checkPeer(4, 0, 3), "");
  EXPECT_EQ(checkPeer(4, 2, 4), "peer 4 is not a rank of the group of 4");
  EXPECT_EQ(checkPeer(4, 2, -1),
            "peer -1 is not a rank of the group of 4");
  EXPECT_EQ(checkPeer(4, 2, 2), "peer 2 is this rank itself");
}

TEST(CollectivePlan, PointToPointHeadersMatchOnlySendWithRecvOfOneSize) {
  P2PHeader send{Send, 16, 0}, recv{Recv, 16, 0};
  EXPECT_EQ(p2pMismatch(0, send, 1, recv), "");
  P2PHeader longer{Recv, 20, 0};
  EXPECT_EQ(p2pMismatch(0, send, 1, longer),
            "send/recv mismatch between ranks 0 and 1: rank 0 issued send of "
            "16 B of f32 while rank 1 issued recv of 20 B of f32");
  P2PHeader i64{Recv, 16, 4};
  EXPECT_NE(p2pMismatch(0, send, 1, i64).find("recv of 16 B of i64"),
            std::string::npos);
  // Two sends facing each other (both ranks called moe_rt_send) match
  // nothing.
  EXPECT_NE(p2pMismatch(0, send, 1, send), "");
}

} // namespace
