//===- CpuTasks.h - queueing the CPU backend's work -------------*- C++ -*-===//
//
// The CPU backend runs an op as host tasks on its stream (a worker thread,
// or the communication pool's): shapes arrive checked from the C API, data
// is read when the task runs.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CPU_CPUTASKS_H
#define MOE_RT_SRC_CPU_CPUTASKS_H

#include "../Backend.h"
#include "../TensorAccess.h"

#include <cstring>
#include <functional>
#include <memory>
#include <string>

namespace moe_rt::cpu {

/// Queues `task`; a non-OK status (with its message) fails the stream.
inline moe_rt_status enqueue(moe_rt_stream s,
                             std::function<moe_rt_status(std::string &)> task,
                             bool low = false) {
  return s->impl->enqueueHost(std::move(task), low);
}

/// Queues `body`, which cannot fail.
inline moe_rt_status task(moe_rt_stream s, std::function<void()> body) {
  return enqueue(s, [body](std::string &) {
    body();
    return MOE_RT_OK;
  });
}

/// An op's last task, after its collectives: `body`, unless an earlier
/// task of the op recorded an error in `state->error` (its collectives
/// then moved nothing), in which case that error, under the call's name.
/// The task holds `state`, so the buffers in it outlive every collective
/// that reads them.
template <class State>
moe_rt_status finishOp(moe_rt_stream s, const char *call,
                       std::shared_ptr<State> state,
                       std::function<void()> body) {
  std::string name = call;
  return enqueue(s, [=](std::string &message) {
    if (state->error.empty()) {
      body();
      return MOE_RT_OK;
    }
    message = name + ": " + state->error;
    return MOE_RT_INVALID_ARGUMENT;
  });
}

/// Zero-fills a gradient the kernels accumulate into (null: absent).
inline void zero(moe_rt_tensor *t) {
  if (t)
    std::memset(t->data, 0,
                moe_rt_tensor_numel(t) * moe_rt_dtype_size(t->dtype));
}

} // namespace moe_rt::cpu

#endif // MOE_RT_SRC_CPU_CPUTASKS_H
