//===- CpuStream.cpp - a stream as an in-order worker thread --------------===//
//
// CUDA stream semantics on the host: tasks run one at a time in issue order
// on a dedicated thread; events mark points in that order; a wait blocks the
// stream's own thread, never the caller. A failed task makes the stream
// sticky-failed (like a CUDA error): later tasks are skipped, but event
// records still complete so that other streams are not left hanging.
//
//===----------------------------------------------------------------------===//

#include "CpuEvent.h"

#include "../Backend.h"
#include "../Error.h"
#include "../Profile.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace moe_rt {
namespace {

using Clock = std::chrono::steady_clock;

class CpuStream final : public StreamImpl {
public:
  /// A queued unit of work. `always` tasks (event records) run even after
  /// the stream failed.
  struct Task {
    std::function<moe_rt_status(std::string &)> run;
    bool always = false;
  };

  CpuStream() : worker([this] { loop(); }) {}

  ~CpuStream() override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    worker.join();
  }

  moe_rt_backend backend() const override { return MOE_RT_CPU; }

  moe_rt_status enqueue(moe_rt_task_fn fn, void *arg) override {
    push({profile::timed(hostTask(fn, arg), this)});
    return ok();
  }

  moe_rt_status enqueueHost(HostTask task, bool) override {
    push({profile::timed(std::move(task), this)});
    return ok();
  }

  moe_rt_status synchronize(double timeoutSeconds) override {
    std::unique_lock<std::mutex> lock(mutex);
    auto idle = [&] { return queue.empty() && !busy; };
    if (timeoutSeconds <= 0)
      this->idle.wait(lock, idle);
    else if (!this->idle.wait_for(
                 lock, std::chrono::duration<double>(timeoutSeconds), idle))
      return fail(MOE_RT_TIMEOUT,
                  withStallDiagnosis("stream did not finish within " +
                                         std::to_string(timeoutSeconds) + " s",
                                     timeoutSeconds));
    if (status != MOE_RT_OK)
      return fail(status, "stream failed: " + statusMessage);
    return ok();
  }

  moe_rt_status record(EventImpl &event) override {
    auto &cpuEvent = static_cast<CpuEvent &>(event);
    uint64_t generation = cpuEvent.nextGeneration();
    push({[&cpuEvent, generation](std::string &) {
            cpuEvent.complete(generation);
            return MOE_RT_OK;
          },
          /*always=*/true});
    return ok();
  }

  moe_rt_status wait(EventImpl &event, double timeoutSeconds) override {
    auto &cpuEvent = static_cast<CpuEvent &>(event);
    uint64_t generation = cpuEvent.latestGeneration();
    push({[&cpuEvent, generation, timeoutSeconds](std::string &message) {
      if (cpuEvent.waitFor(generation, timeoutSeconds))
        return MOE_RT_OK;
      message = withStallDiagnosis(
          "event wait timed out after " + std::to_string(timeoutSeconds) +
              " s (the recording stream or its peer made no progress)",
          timeoutSeconds);
      return MOE_RT_TIMEOUT;
    }});
    return ok();
  }

private:
  void push(Task task) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      queue.push_back(std::move(task));
    }
    wake.notify_one();
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty() && stopping)
        return;
      Task task = std::move(queue.front());
      queue.pop_front();
      bool skip = status != MOE_RT_OK && !task.always;
      busy = true;
      lock.unlock();
      std::string message;
      moe_rt_status result = skip ? MOE_RT_OK : task.run(message);
      lock.lock();
      busy = false;
      if (result != MOE_RT_OK && status == MOE_RT_OK) {
        status = result;
        statusMessage = std::move(message);
      }
      if (queue.empty())
        idle.notify_all();
    }
  }

  std::mutex mutex;
  std::condition_variable wake, idle;
  std::deque<Task> queue;
  bool busy = false, stopping = false;
  moe_rt_status status = MOE_RT_OK;
  std::string statusMessage;
  std::thread worker; // last: starts after the members it uses exist
};

} // namespace

std::unique_ptr<StreamImpl> createCpuStream() {
  return std::make_unique<CpuStream>();
}
std::unique_ptr<EventImpl> createCpuEvent() {
  return std::make_unique<CpuEvent>();
}

} // namespace moe_rt
