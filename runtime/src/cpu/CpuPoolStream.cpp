//===- CpuPoolStream.cpp - the all-to-all / all-reduce priority pool ------===//
//
// FlowMoE §3.3 / Alg. 2 on the host: one communication worker and two
// in-order queues. When the worker is free it runs the head of the
// high-priority queue (all-to-alls) if its waits are satisfied, else the head
// of the low-priority queue (all-reduce chunks) if its waits are, else it
// waits for an event. A task never preempts another, so a chunk in flight
// delays a newly ready all-to-all by at most the chunk's length. A wait
// gates the next task enqueued after it, in whichever queue — exactly the
// rule the compiler's moe-insert-syncs, verifier and simulator assume
// (lib/Analysis/StreamOrder.h). Failures are sticky as on CpuStream.
//
//===----------------------------------------------------------------------===//

#include "CpuEvent.h"

#include "../Backend.h"
#include "../Error.h"
#include "../Profile.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace moe_rt {
namespace {

using Clock = std::chrono::steady_clock;

class CpuPoolStream final : public StreamImpl {
public:
  CpuPoolStream() : worker([this] { loop(); }) {}

  ~CpuPoolStream() override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    worker.join();
  }

  moe_rt_backend backend() const override { return MOE_RT_CPU; }

  moe_rt_status enqueue(moe_rt_task_fn fn, void *arg) override {
    return enqueueHost(hostTask(fn, arg), false);
  }

  moe_rt_status enqueueHost(HostTask task, bool lowPriority) override {
    Item item;
    item.run = profile::timed(std::move(task), this);
    return push(std::move(item), lowPriority);
  }

  moe_rt_status enqueueAsync(AsyncStep step, bool lowPriority) override {
    Item item;
    item.step = profile::timed(std::move(step), this);
    return push(std::move(item), lowPriority);
  }

  moe_rt_status record(EventImpl &event) override {
    auto &cpuEvent = static_cast<CpuEvent &>(event);
    uint64_t generation = cpuEvent.nextGeneration();
    std::lock_guard<std::mutex> lock(mutex);
    // The event completes with the task enqueued before it (and so with
    // everything earlier in that task's queue): still queued or running —
    // the list stays attached to that task wherever it moves — or done.
    if (lastCompletes && !lastCompletes->done)
      lastCompletes->events.push_back({&cpuEvent, generation});
    else
      cpuEvent.complete(generation);
    return ok();
  }

  moe_rt_status wait(EventImpl &event, double timeoutSeconds) override {
    auto &cpuEvent = static_cast<CpuEvent &>(event);
    std::lock_guard<std::mutex> lock(mutex);
    pendingWaits.push_back(
        {&cpuEvent, cpuEvent.latestGeneration(), timeoutSeconds});
    return ok();
  }

  moe_rt_status synchronize(double timeoutSeconds) override {
    std::unique_lock<std::mutex> lock(mutex);
    auto idle = [&] {
      return drained() && !flight[0].active && !flight[1].active;
    };
    if (timeoutSeconds <= 0)
      idleCv.wait(lock, idle);
    else if (!idleCv.wait_for(
                 lock, std::chrono::duration<double>(timeoutSeconds), idle))
      return fail(MOE_RT_TIMEOUT,
                  withStallDiagnosis("communication pool did not finish "
                                     "within " +
                                         std::to_string(timeoutSeconds) + " s",
                                     timeoutSeconds));
    if (status != MOE_RT_OK)
      return fail(status, "communication pool failed: " + statusMessage);
    return ok();
  }

private:
  struct Wait {
    CpuEvent *event;
    uint64_t generation;
    double timeoutSeconds;
  };
  struct Completion {
    CpuEvent *event;
    uint64_t generation;
  };
  /// The events a task completes when it finishes. Shared with
  /// `lastCompletes` so that a record issued while the task is queued or
  /// running finds it without knowing where the task is.
  struct Completions {
    std::vector<Completion> events;
    bool done = false;
  };
  struct Item {
    HostTask run;
    AsyncStep step; // set instead of `run` for a non-blocking task
    std::vector<Wait> waits;
    std::shared_ptr<Completions> completes = std::make_shared<Completions>();
    Clock::time_point queuedAt = Clock::now();
  };

  /// The longest limit of the item's waits (what a timed-out wait had).
  static double waitTimeout(const Item &item) {
    double t = 0;
    for (const Wait &w : item.waits)
      t = std::max(t, w.timeoutSeconds);
    return t;
  }

  /// Whether the item's waits are satisfied; sets `timedOut` with a message
  /// when one has waited past its limit.
  static bool ready(const Item &item, std::string &timedOut) {
    for (const Wait &w : item.waits) {
      if (w.event->reached(w.generation))
        continue;
      std::chrono::duration<double> waited = Clock::now() - item.queuedAt;
      if (w.timeoutSeconds > 0 && waited.count() > w.timeoutSeconds)
        timedOut = "event wait timed out after " +
                   std::to_string(w.timeoutSeconds) +
                   " s (the recording stream or its peer made no progress)";
      return false;
    }
    return true;
  }

  /// Queues `item` behind the waits issued since the last task.
  moe_rt_status push(Item item, bool lowPriority) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      item.waits = std::move(pendingWaits);
      pendingWaits.clear();
      std::deque<Item> &queue = lowPriority ? low : high;
      lastCompletes = item.completes;
      queue.push_back(std::move(item));
    }
    wake.notify_all();
    return ok();
  }

  /// Per queue: the non-blocking task in flight, if any.
  struct InFlight {
    bool active = false;
    Item item;
  };

  /// Records a finished task's outcome and completes its events. Called
  /// with the lock held.
  void finish(Item &item, moe_rt_status result, std::string &message) {
    // Events still complete, so that other streams learn of a failure
    // instead of waiting forever.
    item.completes->done = true;
    for (const Completion &c : item.completes->events)
      c.event->complete(c.generation);
    if (result != MOE_RT_OK && status == MOE_RT_OK) {
      status = result;
      statusMessage = std::move(message);
    }
  }

  /// Takes the head of `queue` off it (lock held).
  static Item take(std::deque<Item> &queue) {
    Item item = std::move(queue.front());
    queue.pop_front();
    return item;
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      bool progressed = false;
      // Progress the tasks in flight.
      for (InFlight &f : flight) {
        if (!f.active)
          continue;
        lock.unlock();
        std::string message;
        moe_rt_status result = MOE_RT_OK;
        bool done = f.item.step(message, result);
        lock.lock();
        if (done) {
          finish(f.item, result, message);
          f.active = false;
          progressed = true;
        }
      }
      // Start the next task: the high queue's head when it is free and
      // ready; the low queue's only when no all-to-all is in flight or
      // ready (Alg. 2).
      std::string highTimeout, lowTimeout, timedOut;
      bool highReady = !flight[0].active && !high.empty() &&
                       ready(high.front(), highTimeout);
      bool lowReady = !highReady && !flight[0].active && !flight[1].active &&
                      !low.empty() && ready(low.front(), lowTimeout);
      int q = highReady ? 0 : lowReady ? 1 : -1;
      if (q < 0 && (!highTimeout.empty() || !lowTimeout.empty())) {
        q = !highTimeout.empty() ? 0 : 1;
        timedOut = !highTimeout.empty() ? highTimeout : lowTimeout;
      }
      if (q >= 0) {
        std::deque<Item> &queue = q == 0 ? high : low;
        Item item = take(queue);
        bool skip = status != MOE_RT_OK;
        std::string message = timedOut;
        moe_rt_status result = !timedOut.empty() ? MOE_RT_TIMEOUT : MOE_RT_OK;
        busy = true;
        lock.unlock();
        // Outside the lock: naming a silent rank takes a liveness probe.
        if (!timedOut.empty())
          message = withStallDiagnosis(timedOut, waitTimeout(item));
        bool done = true;
        if (timedOut.empty() && !skip) {
          if (item.step)
            done = item.step(message, result);
          else
            result = item.run(message);
        }
        lock.lock();
        busy = false;
        if (done) {
          finish(item, result, message);
        } else {
          flight[q].active = true;
          flight[q].item = std::move(item);
        }
        progressed = true;
      }
      bool idle =
          high.empty() && low.empty() && !flight[0].active && !flight[1].active;
      if (idle) {
        idleCv.notify_all();
        if (stopping)
          return;
      }
      if (!progressed) {
        // Events complete and requests progress without telling this
        // thread: poll.
        wake.wait_for(lock,
                      std::chrono::microseconds(
                          flight[0].active || flight[1].active ? 20 : 200));
      }
    }
  }

  /// Whether nothing is queued or in flight (lock held).
  bool drained() const { return high.empty() && low.empty() && !busy; }

  std::mutex mutex;
  std::condition_variable wake, idleCv;
  std::deque<Item> high, low;
  InFlight flight[2];       // 0: high, 1: low
  // The completions of the last task enqueued (an event recorded now
  // completes with it).
  std::shared_ptr<Completions> lastCompletes;
  std::vector<Wait> pendingWaits;
  bool busy = false, stopping = false;
  moe_rt_status status = MOE_RT_OK;
  std::string statusMessage;
  std::thread worker; // last: starts after the members it uses exist
};

} // namespace

std::unique_ptr<StreamImpl> createCpuPoolStream() {
  return std::make_unique<CpuPoolStream>();
}

} // namespace moe_rt
