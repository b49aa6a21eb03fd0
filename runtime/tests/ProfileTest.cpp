//===- ProfileTest.cpp - per-step task timing (moe_rt/profile.h) ----------===//
//
// Known work, known report: tasks that sleep a known time on named streams,
// charged to the op class named when they were queued; the busy time is the
// union of a stream's tasks, the idle time what is left of the wall time.

#include "moe_rt/profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <thread>

namespace {

int sleepMs(void *ms) {
  std::this_thread::sleep_for(
      std::chrono::milliseconds(*static_cast<int *>(ms)));
  return 0;
}

/// The report of one step, as "key -> number" ("wall_us", "op NAME tasks",
/// "op NAME us", "stream NAME busy_us", "stream NAME idle_us").
std::map<std::string, long long> report(int64_t step) {
  char *text = nullptr;
  size_t size = 0;
  FILE *out = open_memstream(&text, &size);
  moe_rt_profile_step_end(out, 3, step);
  std::fclose(out);
  std::map<std::string, long long> values;
  std::istringstream lines(text);
  std::free(text);
  std::string line;
  std::string prefix = "profile rank 3 step " + std::to_string(step) + " ";
  while (std::getline(lines, line)) {
    EXPECT_EQ(line.rfind(prefix, 0), 0u) << line;
    std::istringstream words(line.substr(prefix.size()));
    std::string kind, name, k1, k2;
    long long v1 = 0, v2 = 0;
    words >> kind;
    if (kind == "wall_us") {
      words >> values["wall_us"];
    } else {
      words >> name >> k1 >> v1 >> k2 >> v2;
      values[kind + " " + name + " " + k1] = v1;
      values[kind + " " + name + " " + k2] = v2;
    }
  }
  return values;
}

TEST(Profile, ChargesTasksToTheirOpAndStream) {
  moe_rt_profile_enable(1);
  moe_rt_stream a, b;
  ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &a), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &b), MOE_RT_OK);
  moe_rt_profile_name_stream(a, "compute.0");
  moe_rt_profile_name_stream(b, "compute.1");
  int thirty = 30, ten = 10;
  moe_rt_profile_step_begin();
  moe_rt_profile_set_op("slow");
  ASSERT_EQ(moe_rt_stream_enqueue(a, sleepMs, &thirty), MOE_RT_OK);
  moe_rt_profile_set_op("fast");
  ASSERT_EQ(moe_rt_stream_enqueue(a, sleepMs, &ten), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_enqueue(b, sleepMs, &ten), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(a, 10), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(b, 10), MOE_RT_OK);
  std::map<std::string, long long> r = report(7);
  moe_rt_profile_enable(0);

  EXPECT_GE(r["wall_us"], 40000);
  EXPECT_EQ(r["op slow tasks"], 1);
  EXPECT_GE(r["op slow us"], 30000);
  EXPECT_LT(r["op slow us"], r["wall_us"]);
  EXPECT_EQ(r["op fast tasks"], 2);
  EXPECT_GE(r["op fast us"], 20000);
  // a ran 40 ms of the step, b 10 ms; idle is the rest of the wall time.
  EXPECT_GE(r["stream compute.0 busy_us"], 40000);
  EXPECT_GE(r["stream compute.1 busy_us"], 10000);
  EXPECT_LT(r["stream compute.1 busy_us"], r["stream compute.0 busy_us"]);
  for (const char *s : {"compute.0", "compute.1"})
    EXPECT_EQ(r[std::string("stream ") + s + " busy_us"] +
                  r[std::string("stream ") + s + " idle_us"],
              r["wall_us"])
        << s;
  moe_rt_stream_destroy(a);
  moe_rt_stream_destroy(b);
}

TEST(Profile, OffByDefaultAndReportsNothing) {
  EXPECT_EQ(moe_rt_profile_enabled(), 0);
  moe_rt_stream a;
  ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &a), MOE_RT_OK);
  int one = 1;
  moe_rt_profile_step_begin();
  ASSERT_EQ(moe_rt_stream_enqueue(a, sleepMs, &one), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(a, 10), MOE_RT_OK);
  EXPECT_TRUE(report(1).empty());
  moe_rt_stream_destroy(a);
}

} // namespace
