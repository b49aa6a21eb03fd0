//===- Backend.h - what a stream/event backend implements -------*- C++ -*-===//
//
// The C API in moe_rt.h dispatches to these interfaces; the CPU backend
// (src/cpu) and the CUDA backend (src/cuda) implement them.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_BACKEND_H
#define MOE_RT_SRC_BACKEND_H

#include "moe_rt/moe_rt.h"

#include <functional>
#include <memory>
#include <string>

struct moe_rt_stream_impl;

namespace moe_rt {

class EventImpl {
public:
  virtual ~EventImpl() = default;
  virtual moe_rt_backend backend() const = 0;
  virtual bool query() = 0;
};

class StreamImpl {
public:
  virtual ~StreamImpl() = default;
  virtual moe_rt_backend backend() const = 0;
  virtual moe_rt_status enqueue(moe_rt_task_fn fn, void *arg) = 0;
  /// A host task that reports failure through its status and message.
  using HostTask = std::function<moe_rt_status(std::string &message)>;
  /// `lowPriority` puts it in a communication pool's low-priority queue
  /// (all-reduce chunks); streams without a pool ignore it.
  virtual moe_rt_status enqueueHost(HostTask task,
                                    bool lowPriority = false) = 0;
  /// A task that runs in non-blocking steps (a collective: post, then test):
  /// `step` returns true once finished, with `status` and `message` set. A
  /// pool keeps one in flight per queue while it runs others, so that an
  /// all-reduce in flight never blocks an all-to-all on this rank (and no
  /// two ranks deadlock waiting for each other's other class). Streams
  /// without a pool run it to completion.
  using AsyncStep =
      std::function<bool(std::string &message, moe_rt_status &status)>;
  virtual moe_rt_status enqueueAsync(AsyncStep step, bool lowPriority) {
    return enqueueHost(
        [step](std::string &message) {
          moe_rt_status status = MOE_RT_OK;
          while (!step(message, status))
            ;
          return status;
        },
        lowPriority);
  }
  virtual moe_rt_status synchronize(double timeoutSeconds) = 0;
  virtual moe_rt_status record(EventImpl &event) = 0;
  virtual moe_rt_status wait(EventImpl &event, double timeoutSeconds) = 0;
};

/// A C task function as a host task: a non-zero return fails the stream.
inline StreamImpl::HostTask hostTask(moe_rt_task_fn fn, void *arg) {
  return [fn, arg](std::string &message) {
    int rc = fn(arg);
    if (rc == 0)
      return MOE_RT_OK;
    message = "task returned " + std::to_string(rc);
    return MOE_RT_BACKEND_ERROR;
  };
}

std::unique_ptr<StreamImpl> createCpuStream();
/// FlowMoE's communication pool (Alg. 2): one worker, two in-order queues;
/// it runs the first ready high-priority task, or else the first ready
/// low-priority one. A wait gates the next task enqueued after it.
std::unique_ptr<StreamImpl> createCpuPoolStream();
std::unique_ptr<EventImpl> createCpuEvent();

/// CUDA factories: fail with MOE_RT_UNAVAILABLE (and a message) when the
/// runtime was built without CUDA or no device is present.
moe_rt_status createCudaStream(std::unique_ptr<StreamImpl> &out);
moe_rt_status createCudaEvent(std::unique_ptr<EventImpl> &out);
moe_rt_status cudaAllocZeroed(size_t bytes, void **out);
moe_rt_status cudaFree(void *ptr);
moe_rt_status cudaScale(struct ::moe_rt_stream_impl *stream, float *data,
                        int64_t n, float factor);

/// FlowMoE's pool on a GPU: a high-priority CUDA stream (all-to-alls) and a
/// low-priority one (all-reduce chunks); see CudaBackend.cpp.
moe_rt_status createCudaPoolStream(std::unique_ptr<StreamImpl> &out);
/// Synchronous copy of `bytes` between any two backends' memory
/// (moe_rt_tensor_copy); ordered after nothing queued on runtime streams.
moe_rt_status cudaCopyBytes(void *dst, moe_rt_backend dstBackend,
                            const void *src, moe_rt_backend srcBackend,
                            size_t bytes);
/// Synchronous zero fill of device memory.
moe_rt_status cudaZeroBytes(void *ptr, size_t bytes);

/// Something beyond the device that work on a CUDA stream depends on: an
/// NCCL communicator whose kernels wait for peers. A CUDA stream's
/// synchronize polls its watches while it waits (an asynchronous error
/// fails it at once) and, when it times out, lets each abort its
/// communicator and say why (the group, the ranks that did not answer).
class CommWatch {
public:
  virtual ~CommWatch() = default;
  /// "" while healthy; else a message (the communicator is then aborted).
  virtual std::string poll() = 0;
  /// The stream timed out: abort the communicator; a message naming the
  /// group and the unresponsive ranks.
  virtual std::string onTimeout() = 0;
};
/// Registers `watch` with CUDA stream `stream` (once per watch; expired
/// watches are dropped). A no-op for other streams.
void watchCudaStream(struct ::moe_rt_stream_impl *stream,
                     std::weak_ptr<CommWatch> watch);

/// Why a wait that timed out made no progress, when another rank is the
/// cause: "rank(s) 3 did not respond". The MPI transport provides it once a
/// world group exists (src/mpi/Liveness.h); streams append it to the error
/// of an event wait or a synchronize that timed out, so that every rank of
/// a job with a dead or stopped rank names it, whatever it was waiting on.
/// "" when no transport is set or every rank answered.
using StallDiagnosis = std::string (*)(double timeoutSeconds);
void setStallDiagnosis(StallDiagnosis diagnosis);
/// `message` followed by "; " and the diagnosis, if there is one.
std::string withStallDiagnosis(std::string message, double timeoutSeconds);

} // namespace moe_rt

struct moe_rt_stream_impl {
  std::unique_ptr<moe_rt::StreamImpl> impl;
};

struct moe_rt_event_impl {
  std::unique_ptr<moe_rt::EventImpl> impl;
};

#endif // MOE_RT_SRC_BACKEND_H
