//===- CoupledScheduleTest.cpp - every rank of a CPU cluster at once ------===//
//
// coupledSchedule (ListScheduler.h) on hand-made tasks whose durations
// differ between two ranks in ways a step's IR cannot express (two compute
// streams), to pin down the pool's two slots: a chunk one rank posted early
// must not keep an all-to-all its peer already posted from starting.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/ListScheduler.h"

#include <gtest/gtest.h>

using namespace mlir::moe;

namespace {

QueuedTask task(unsigned stream, double us, std::vector<unsigned> deps = {},
                bool low = false) {
  QueuedTask t;
  t.stream = stream;
  t.durationUs = us;
  t.deps = std::move(deps);
  t.lowPriority = low;
  return t;
}

// Streams 0 and 1 compute, stream 2 is the pool. P (stream 0) gates the
// all-reduce chunk AR (low priority), Q (stream 1) the all-to-all X. Rank 0
// finishes P first and posts AR at 10; rank 1 finishes Q first and posts X
// at 10. At 50 rank 0's Q ends: X starts in the pool's high slot beside
// the waiting AR and runs 50-70 on both ranks (AR is not running: it
// does not share the link yet); then rank 1 posts AR, which runs 70-100.
// With one slot per pool, rank 0's AR would hold X back and neither rank
// could progress.
TEST(CoupledSchedule, AnAllToAllStartsBesideAChunkWaitingForItsPeer) {
  std::vector<QueuedTask> tasks = {
      task(0, 0), task(1, 0),            // P, Q (durations per rank below)
      task(2, 20, {1}),                  // X: waits Q
      task(2, 30, {0}, /*low=*/true)};   // AR: waits P
  CoupledRanks ranks;
  ranks.durationUs = {{10, 50, 20, 30}, {50, 10, 20, 30}};
  ranks.groupKey = {{}, {}, {0, 0}, {0, 0}};
  std::vector<bool> comm = {false, false, true};
  ASSERT_TRUE(coupledSchedule(tasks, ranks, comm, 0.0, 2.0, 1.0, {}));
  // X: posted at 50 by rank 0, at 10 by rank 1; runs 50-70.
  EXPECT_DOUBLE_EQ(ranks.startUs[0][2], 50);
  EXPECT_DOUBLE_EQ(ranks.startUs[1][2], 10);
  EXPECT_DOUBLE_EQ(ranks.endUs[0][2], 70);
  EXPECT_DOUBLE_EQ(ranks.endUs[1][2], 70);
  // AR: posted at 10 by rank 0, at 70 by rank 1 (its pool's high slot was
  // busy until then); runs 70-100.
  EXPECT_DOUBLE_EQ(ranks.startUs[0][3], 10);
  EXPECT_DOUBLE_EQ(ranks.startUs[1][3], 70);
  EXPECT_DOUBLE_EQ(ranks.endUs[0][3], 100);
  EXPECT_DOUBLE_EQ(ranks.endUs[1][3], 100);
}

// Two collectives running on one pool at once share its link: X and AR
// posted together run at half rate each. Both ranks alike, no compute.
TEST(CoupledSchedule, TwoRunningCollectivesShareThePoolsLink) {
  std::vector<QueuedTask> tasks = {task(0, 10), task(1, 0),
                                   task(2, 20, {0}, /*low=*/true),
                                   task(2, 20, {1})};
  // Rank r: P (stream 0) 10 us; Q (stream 1) 20 us. AR waits P, X waits Q:
  // AR starts at 10 alone (no all-to-all ready), X at 20 in the high slot;
  // from 20 both at half rate: AR has 10 left (ends 40), X 20 (10 done by
  // 40, the rest alone: ends 50).
  CoupledRanks ranks;
  ranks.durationUs = {{10, 20, 20, 20}, {10, 20, 20, 20}};
  ranks.groupKey = {{}, {}, {0, 0}, {0, 0}};
  std::vector<bool> comm = {false, false, true};
  ASSERT_TRUE(coupledSchedule(tasks, ranks, comm, 0.0, 1.0, 1.0, {}));
  for (int r = 0; r < 2; ++r) {
    EXPECT_DOUBLE_EQ(ranks.startUs[r][2], 10);
    EXPECT_DOUBLE_EQ(ranks.endUs[r][2], 40);
    EXPECT_DOUBLE_EQ(ranks.startUs[r][3], 20);
    EXPECT_DOUBLE_EQ(ranks.endUs[r][3], 50);
  }
}

} // namespace
