//===- StreamTest.cpp - CPU streams and events ----------------------------===//

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
  void add(std::string entry) {
    std::lock_guard<std::mutex> lock(mutex);
    entries.push_back(std::move(entry));
  }
};

struct Append {
  Log *log;
  std::string entry;
  int sleepMs = 0;
  static int run(void *arg) {
    auto *self = static_cast<Append *>(arg);
    if (self->sleepMs)
      std::this_thread::sleep_for(std::chrono::milliseconds(self->sleepMs));
    self->log->add(self->entry);
    return 0;
  }
};

struct Gate {
  std::atomic<bool> open{false};
  static int run(void *arg) {
    auto *self = static_cast<Gate *>(arg);
    while (!self->open)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return 0;
  }
};

int failTask(void *) { return 7; }

class StreamTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &a), MOE_RT_OK);
    ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &b), MOE_RT_OK);
    ASSERT_EQ(moe_rt_event_create(MOE_RT_CPU, &event), MOE_RT_OK);
  }
  void TearDown() override {
    moe_rt_event_destroy(event);
    moe_rt_stream_destroy(a);
    moe_rt_stream_destroy(b);
  }
  moe_rt_stream a = nullptr, b = nullptr;
  moe_rt_event event = nullptr;
};

TEST_F(StreamTest, RunsTasksInIssueOrder) {
  Log log;
  std::vector<Append> tasks;
  for (int i = 0; i < 50; ++i)
    tasks.push_back({&log, std::to_string(i), i % 7 == 0 ? 2 : 0});
  for (Append &t : tasks)
    ASSERT_EQ(moe_rt_stream_enqueue(a, Append::run, &t), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(a, 10.0), MOE_RT_OK);
  ASSERT_EQ(log.entries.size(), 50u);
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(log.entries[i], std::to_string(i));
}

// The FlowMoE cross-stream pattern: the communication stream's task waits for
// a compute task that takes longer, through an event.
TEST_F(StreamTest, WaitEventOrdersAcrossStreams) {
  Log log;
  Append slow{&log, "compute", 50}, comm{&log, "comm"};
  ASSERT_EQ(moe_rt_stream_enqueue(a, Append::run, &slow), MOE_RT_OK);
  ASSERT_EQ(moe_rt_event_record(event, a), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_wait_event(b, event, 10.0), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_enqueue(b, Append::run, &comm), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(b, 10.0), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(a, 10.0), MOE_RT_OK);
  ASSERT_EQ(log.entries, (std::vector<std::string>{"compute", "comm"}));
  EXPECT_EQ(moe_rt_event_query(event), 1);
}

// Without the wait, the independent stream does not wait for the slow task:
// the streams really overlap.
TEST_F(StreamTest, StreamsOverlapWithoutEvents) {
  Log log;
  Gate gate;
  Append fast{&log, "fast"};
  ASSERT_EQ(moe_rt_stream_enqueue(a, Gate::run, &gate), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_enqueue(b, Append::run, &fast), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(b, 10.0), MOE_RT_OK);
  EXPECT_EQ(log.entries, std::vector<std::string>{"fast"});
  gate.open = true;
  ASSERT_EQ(moe_rt_stream_synchronize(a, 10.0), MOE_RT_OK);
}

TEST_F(StreamTest, WaitsOnlyForTheLatestRecordAtWaitTime) {
  Gate gate;
  // Never recorded: waiting is a no-op, as in CUDA.
  ASSERT_EQ(moe_rt_stream_wait_event(b, event, 1.0), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(b, 10.0), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_enqueue(a, Gate::run, &gate), MOE_RT_OK);
  ASSERT_EQ(moe_rt_event_record(event, a), MOE_RT_OK);
  EXPECT_EQ(moe_rt_event_query(event), 0);
  gate.open = true;
  ASSERT_EQ(moe_rt_stream_synchronize(a, 10.0), MOE_RT_OK);
  EXPECT_EQ(moe_rt_event_query(event), 1);
}

// A peer that never makes progress fails the waiting stream after the
// timeout, with a message, instead of hanging it.
TEST_F(StreamTest, WaitTimesOutWithAMessage) {
  Gate gate;
  ASSERT_EQ(moe_rt_stream_enqueue(a, Gate::run, &gate), MOE_RT_OK);
  ASSERT_EQ(moe_rt_event_record(event, a), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_wait_event(b, event, 0.05), MOE_RT_OK);
  EXPECT_EQ(moe_rt_stream_synchronize(b, 10.0), MOE_RT_TIMEOUT);
  EXPECT_NE(std::string(moe_rt_last_error()).find("event wait timed out"),
            std::string::npos)
      << moe_rt_last_error();
  gate.open = true;
  EXPECT_EQ(moe_rt_stream_synchronize(a, 10.0), MOE_RT_OK);
}

TEST_F(StreamTest, SynchronizeTimesOut) {
  Gate gate;
  ASSERT_EQ(moe_rt_stream_enqueue(a, Gate::run, &gate), MOE_RT_OK);
  EXPECT_EQ(moe_rt_stream_synchronize(a, 0.05), MOE_RT_TIMEOUT);
  EXPECT_NE(std::string(moe_rt_last_error()).find("did not finish"),
            std::string::npos);
  gate.open = true;
  EXPECT_EQ(moe_rt_stream_synchronize(a, 10.0), MOE_RT_OK);
}

// A failed task is sticky: later tasks are skipped, but events still
// complete, so that other streams learn of it instead of hanging.
TEST_F(StreamTest, FailedTaskIsStickyButReleasesEvents) {
  Log log;
  Append after{&log, "after"};
  ASSERT_EQ(moe_rt_stream_enqueue(a, failTask, nullptr), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_enqueue(a, Append::run, &after), MOE_RT_OK);
  ASSERT_EQ(moe_rt_event_record(event, a), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_wait_event(b, event, 5.0), MOE_RT_OK);
  EXPECT_EQ(moe_rt_stream_synchronize(b, 10.0), MOE_RT_OK);
  EXPECT_EQ(moe_rt_stream_synchronize(a, 10.0), MOE_RT_BACKEND_ERROR);
  EXPECT_NE(std::string(moe_rt_last_error()).find("task returned 7"),
            std::string::npos)
      << moe_rt_last_error();
  EXPECT_TRUE(log.entries.empty());
}

TEST(StreamArgs, RejectsBadArgumentsWithMessages) {
  EXPECT_EQ(moe_rt_stream_create(MOE_RT_CPU, nullptr), MOE_RT_INVALID_ARGUMENT);
  EXPECT_STRNE(moe_rt_last_error(), "");
  moe_rt_stream s = nullptr;
  EXPECT_EQ(moe_rt_stream_create(static_cast<moe_rt_backend>(42), &s),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(s, nullptr);
  EXPECT_EQ(moe_rt_stream_enqueue(nullptr, failTask, nullptr),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_stream_synchronize(nullptr, 1.0), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_stream_destroy(nullptr), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_event_record(nullptr, nullptr), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_event_destroy(nullptr), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_event_query(nullptr), 0);
  ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &s), MOE_RT_OK);
  EXPECT_STREQ(moe_rt_last_error(), "");
  EXPECT_EQ(moe_rt_stream_enqueue(s, nullptr, nullptr),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_stream_destroy(s), MOE_RT_OK);
  EXPECT_STREQ(moe_rt_status_name(MOE_RT_TIMEOUT), "MOE_RT_TIMEOUT");
}

} // namespace
