//===- CpuEvent.h - an event of the CPU backend -----------------*- C++ -*-===//
//
// Generations: a record takes the next generation when it is issued and
// completes it when the work before it has run; a wait waits for the
// generation that was latest when the wait was issued (CUDA semantics).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CPU_CPUEVENT_H
#define MOE_RT_SRC_CPU_CPUEVENT_H

#include "../Backend.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace moe_rt {

class CpuEvent final : public EventImpl {
public:
  moe_rt_backend backend() const override { return MOE_RT_CPU; }

  bool query() override {
    std::lock_guard<std::mutex> lock(mutex);
    return completed >= recorded;
  }

  /// Called at record time on the host: the generation the marker completes.
  uint64_t nextGeneration() {
    std::lock_guard<std::mutex> lock(mutex);
    return ++recorded;
  }
  uint64_t latestGeneration() {
    std::lock_guard<std::mutex> lock(mutex);
    return recorded;
  }
  void complete(uint64_t generation) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (generation > completed)
        completed = generation;
    }
    changed.notify_all();
  }
  /// False on timeout (timeoutSeconds <= 0 waits without limit).
  bool waitFor(uint64_t generation, double timeoutSeconds) {
    std::unique_lock<std::mutex> lock(mutex);
    auto done = [&] { return completed >= generation; };
    if (timeoutSeconds <= 0) {
      changed.wait(lock, done);
      return true;
    }
    return changed.wait_for(lock, std::chrono::duration<double>(timeoutSeconds),
                            done);
  }

  /// Whether `generation` has completed (non-blocking).
  bool reached(uint64_t generation) {
    std::lock_guard<std::mutex> lock(mutex);
    return completed >= generation;
  }

private:
  std::mutex mutex;
  std::condition_variable changed;
  uint64_t recorded = 0, completed = 0;
};

} // namespace moe_rt

#endif // MOE_RT_SRC_CPU_CPUEVENT_H
