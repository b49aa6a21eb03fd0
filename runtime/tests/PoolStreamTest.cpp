//===- PoolStreamTest.cpp - the communication priority pool ---------------===//

#include "moe_rt/moe_rt.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Log {
  std::mutex mutex;
  std::vector<std::string> entries;
};
struct Entry {
  Log *log;
  std::string name;
  static int run(void *arg) {
    auto *e = static_cast<Entry *>(arg);
    std::lock_guard<std::mutex> lock(e->log->mutex);
    e->log->entries.push_back(e->name);
    return 0;
  }
};
struct Gate {
  std::atomic<bool> open{false};
  static int run(void *arg) {
    auto *g = static_cast<Gate *>(arg);
    while (!g->open)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return 0;
  }
};

class PoolTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_EQ(moe_rt_stream_create_pool(&pool), MOE_RT_OK);
    ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &compute), MOE_RT_OK);
    ASSERT_EQ(moe_rt_event_create(MOE_RT_CPU, &event), MOE_RT_OK);
  }
  void TearDown() override {
    moe_rt_event_destroy(event);
    moe_rt_stream_destroy(compute);
    moe_rt_stream_destroy(pool);
  }
  moe_rt_stream pool = nullptr, compute = nullptr;
  moe_rt_event event = nullptr;
};

// Alg. 2: with the link busy, a later all-to-all goes before an earlier
// all-reduce chunk once the link frees.
TEST_F(PoolTest, AllToAllBeforeAllReduceChunk) {
  Log log;
  Gate gate;
  Entry chunk{&log, "AR.0"}, a2a{&log, "D_1"};
  ASSERT_EQ(moe_rt_stream_enqueue(pool, Gate::run, &gate), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_enqueue_low(pool, Entry::run, &chunk), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_enqueue(pool, Entry::run, &a2a), MOE_RT_OK);
  gate.open = true;
  ASSERT_EQ(moe_rt_stream_synchronize(pool, 10.0), MOE_RT_OK);
  EXPECT_EQ(log.entries, (std::vector<std::string>{"D_1", "AR.0"}));
}

// A chunk waiting for its gradient does not hold back the all-to-all queued
// after it; it runs as soon as the gradient is ready.
TEST_F(PoolTest, WaitingChunkDoesNotBlockAllToAll) {
  Log log;
  Gate gradient;
  Entry chunk{&log, "AR.0"}, a2a{&log, "C_1"}, computeDone{&log, "AT_1"};
  ASSERT_EQ(moe_rt_stream_enqueue(compute, Gate::run, &gradient), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_enqueue(compute, Entry::run, &computeDone),
            MOE_RT_OK);
  ASSERT_EQ(moe_rt_event_record(event, compute), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_wait_event(pool, event, 10.0), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_enqueue_low(pool, Entry::run, &chunk), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_enqueue(pool, Entry::run, &a2a), MOE_RT_OK);
  // The all-to-all completes while the gradient is still being computed.
  for (int i = 0; i < 5000; ++i) {
    {
      std::lock_guard<std::mutex> lock(log.mutex);
      if (!log.entries.empty())
        break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  {
    std::lock_guard<std::mutex> lock(log.mutex);
    EXPECT_EQ(log.entries, std::vector<std::string>{"C_1"});
  }
  gradient.open = true;
  ASSERT_EQ(moe_rt_stream_synchronize(pool, 10.0), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(compute, 10.0), MOE_RT_OK);
  EXPECT_EQ(log.entries, (std::vector<std::string>{"C_1", "AT_1", "AR.0"}));
}

// Each queue stays in order; an event recorded on the pool completes with
// the task enqueued before it.
TEST_F(PoolTest, QueuesKeepOrderAndEventsFollowTheirTask) {
  Log log;
  Gate gate;
  std::vector<Entry> entries;
  for (const char *n : {"C_2", "C_1", "D_2", "D_1", "AR.0", "AR.1"})
    entries.push_back({&log, n});
  ASSERT_EQ(moe_rt_stream_enqueue(pool, Gate::run, &gate), MOE_RT_OK);
  ASSERT_EQ(moe_rt_event_record(event, pool), MOE_RT_OK);
  EXPECT_EQ(moe_rt_event_query(event), 0) << "the gate still runs";
  for (int i = 0; i < 6; ++i)
    ASSERT_EQ(i < 4 ? moe_rt_stream_enqueue(pool, Entry::run, &entries[i])
                    : moe_rt_stream_enqueue_low(pool, Entry::run, &entries[i]),
              MOE_RT_OK);
  gate.open = true;
  ASSERT_EQ(moe_rt_stream_synchronize(pool, 10.0), MOE_RT_OK);
  EXPECT_EQ(moe_rt_event_query(event), 1);
  EXPECT_EQ(log.entries, (std::vector<std::string>{"C_2", "C_1", "D_2", "D_1",
                                                   "AR.0", "AR.1"}));
}

// An event recorded while the pool's last task runs completes when that
// task finishes, even if another task is queued before it does. (It once
// waited for the next task instead: with that task waiting, through the
// compute stream, on the event itself, both ranks stalled in step 1 under
// oversubscription — "event wait timed out".)
TEST_F(PoolTest, EventRecordedWhileLastTaskRunsCompletesWithIt) {
  struct StartedGate {
    std::atomic<bool> started{false}, open{false};
    static int run(void *arg) {
      auto *g = static_cast<StartedGate *>(arg);
      g->started = true;
      while (!g->open)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return 0;
    }
  } running;
  Log log;
  Entry next{&log, "C_1"};
  moe_rt_event computeDone = nullptr;
  ASSERT_EQ(moe_rt_event_create(MOE_RT_CPU, &computeDone), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_enqueue(pool, StartedGate::run, &running),
            MOE_RT_OK);
  while (!running.started)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(moe_rt_event_record(event, pool), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_wait_event(compute, event, 10.0), MOE_RT_OK);
  ASSERT_EQ(moe_rt_event_record(computeDone, compute), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_wait_event(pool, computeDone, 2.0), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_enqueue(pool, Entry::run, &next), MOE_RT_OK);
  running.open = true;
  EXPECT_EQ(moe_rt_stream_synchronize(pool, 10.0), MOE_RT_OK)
      << moe_rt_last_error();
  EXPECT_EQ(moe_rt_stream_synchronize(compute, 10.0), MOE_RT_OK);
  EXPECT_EQ(log.entries, std::vector<std::string>{"C_1"});
  moe_rt_event_destroy(computeDone);
}

TEST_F(PoolTest, WaitTimesOutInsteadOfHanging) {
  Gate never;
  Entry chunk{nullptr, "AR.0"};
  ASSERT_EQ(moe_rt_stream_enqueue(compute, Gate::run, &never), MOE_RT_OK);
  ASSERT_EQ(moe_rt_event_record(event, compute), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_wait_event(pool, event, 0.05), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_enqueue_low(pool, Entry::run, &chunk), MOE_RT_OK);
  EXPECT_EQ(moe_rt_stream_synchronize(pool, 10.0), MOE_RT_TIMEOUT);
  EXPECT_NE(std::string(moe_rt_last_error()).find("event wait timed out"),
            std::string::npos)
      << moe_rt_last_error();
  never.open = true;
  EXPECT_EQ(moe_rt_stream_synchronize(compute, 10.0), MOE_RT_OK);
}

TEST(PoolArgs, RejectsBadArguments) {
  EXPECT_EQ(moe_rt_stream_create_pool(nullptr), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_stream_enqueue_low(nullptr, nullptr, nullptr),
            MOE_RT_INVALID_ARGUMENT);
}

} // namespace
