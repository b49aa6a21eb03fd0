//===- Profile.cpp - per-step task timing (moe_rt/profile.h) --------------===//

#include "moe_rt/profile.h"

#include "../Profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace moe_rt::profile {
namespace {

using Clock = std::chrono::steady_clock;

struct Interval {
  const StreamImpl *stream;
  const std::string *op;
  Clock::time_point start, end;
};

std::atomic<bool> enabled{false};
thread_local const std::string *currentOp = nullptr;

/// What the streams' workers and the issuing thread share.
struct State {
  std::mutex mutex;
  std::set<std::string> opNames; // interned: intervals point into it
  std::map<const StreamImpl *, std::string> streamNames;
  std::vector<Interval> intervals;
  Clock::time_point stepStart = Clock::now();
};

State &state() {
  static State s;
  return s;
}

void record(const StreamImpl *stream, const std::string *op,
            Clock::time_point start, Clock::time_point end) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.intervals.push_back({stream, op, start, end});
}

int64_t micros(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

/// The length of the union of `spans` (sorted here).
Clock::duration unionLength(std::vector<std::pair<Clock::time_point,
                                                  Clock::time_point>> &spans) {
  std::sort(spans.begin(), spans.end());
  Clock::duration total{0};
  Clock::time_point reach{};
  bool any = false;
  for (auto [start, end] : spans) {
    if (any && start < reach)
      start = reach;
    if (end > start)
      total += end - start;
    reach = any ? std::max(reach, end) : end;
    any = true;
  }
  return total;
}

const std::string &unnamed() {
  static const std::string name = "(unnamed)";
  return name;
}

} // namespace

StreamImpl::HostTask timed(StreamImpl::HostTask task,
                           const StreamImpl *stream) {
  if (!enabled.load(std::memory_order_relaxed))
    return task;
  const std::string *op = currentOp ? currentOp : &unnamed();
  return [task = std::move(task), stream, op](std::string &message) {
    Clock::time_point start = Clock::now();
    moe_rt_status status = task(message);
    record(stream, op, start, Clock::now());
    return status;
  };
}

StreamImpl::AsyncStep timed(StreamImpl::AsyncStep step,
                            const StreamImpl *stream) {
  if (!enabled.load(std::memory_order_relaxed))
    return step;
  const std::string *op = currentOp ? currentOp : &unnamed();
  // std::function must be copyable: the first progress call's time is
  // shared state.
  auto started = std::make_shared<Clock::time_point>();
  return [step = std::move(step), stream, op,
          started](std::string &message, moe_rt_status &status) {
    if (*started == Clock::time_point{})
      *started = Clock::now();
    bool done = step(message, status);
    if (done)
      record(stream, op, *started, Clock::now());
    return done;
  };
}

} // namespace moe_rt::profile

using namespace moe_rt::profile;

extern "C" void moe_rt_profile_enable(int on) { enabled = on != 0; }

extern "C" int moe_rt_profile_enabled(void) { return enabled ? 1 : 0; }

extern "C" void moe_rt_profile_set_op(const char *opClass) {
  if (!enabled.load(std::memory_order_relaxed))
    return;
  if (!opClass) {
    currentOp = nullptr;
    return;
  }
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  currentOp = &*s.opNames.insert(opClass).first;
}

extern "C" void moe_rt_profile_name_stream(moe_rt_stream stream,
                                           const char *name) {
  if (!enabled.load(std::memory_order_relaxed) || !stream || !name)
    return;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.streamNames[stream->impl.get()] = name;
}

extern "C" void moe_rt_profile_step_begin(void) {
  if (!enabled.load(std::memory_order_relaxed))
    return;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.intervals.clear();
  s.stepStart = Clock::now();
}

extern "C" void moe_rt_profile_step_end(FILE *out, int rank, int64_t step) {
  if (!enabled.load(std::memory_order_relaxed) || !out)
    return;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Clock::duration wall = Clock::now() - s.stepStart;
  struct OpTotal {
    int64_t tasks = 0;
    Clock::duration time{0};
  };
  std::map<std::string, OpTotal> ops;
  std::map<std::string, std::vector<std::pair<Clock::time_point,
                                              Clock::time_point>>> streams;
  for (const Interval &i : s.intervals) {
    OpTotal &t = ops[*i.op];
    ++t.tasks;
    t.time += i.end - i.start;
    std::string &name = s.streamNames[i.stream];
    if (name.empty())
      name = "stream." + std::to_string(s.streamNames.size() - 1);
    streams[name].push_back({i.start, i.end});
  }
  std::vector<std::pair<std::string, OpTotal>> byTime(ops.begin(), ops.end());
  std::stable_sort(byTime.begin(), byTime.end(), [](auto &a, auto &b) {
    return a.second.time > b.second.time;
  });
  std::string prefix =
      "profile rank " + std::to_string(rank) + " step " + std::to_string(step);
  std::fprintf(out, "%s wall_us %lld\n", prefix.c_str(),
               (long long)micros(wall));
  for (auto &[name, t] : byTime)
    std::fprintf(out, "%s op %s tasks %lld us %lld\n", prefix.c_str(),
                 name.c_str(), (long long)t.tasks, (long long)micros(t.time));
  for (auto &[name, spans] : streams) {
    int64_t busy = micros(unionLength(spans));
    std::fprintf(out, "%s stream %s busy_us %lld idle_us %lld\n",
                 prefix.c_str(), name.c_str(), (long long)busy,
                 (long long)std::max<int64_t>(0, micros(wall) - busy));
  }
  std::fflush(out);
  s.intervals.clear();
}
