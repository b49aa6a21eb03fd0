//===- NcclCollectives.cpp - NCCL calls on runtime CUDA streams -----------===//
//
// See NcclCollectives.h. Non-blocking communicators: NCCL may answer
// ncclInProgress from any call, and then the communicator's state must be
// polled (ncclCommGetAsyncError) until it leaves ncclInProgress before the
// next call on it. We poll to the communicator's timeout, so neither the
// init (every rank must join) nor an enqueue that needs a peer's connection
// can hang the host.
//
//===----------------------------------------------------------------------===//

#include "NcclCollectives.h"

#include "../Error.h"
#include "CudaStreams.h"

#include <nccl.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

namespace moe_rt::nccl {

static_assert(sizeof(ncclUniqueId) == kUniqueIdBytes,
              "kUniqueIdBytes must match this NCCL's ncclUniqueId");

struct Comm {
  ncclComm_t comm = nullptr;
  double timeoutSeconds = 0;
  std::string label;
  std::mutex mutex; // one NCCL call on the communicator at a time
  bool aborted = false;
};

namespace {

using Clock = std::chrono::steady_clock;

std::string resultText(ncclResult_t r, ncclComm_t comm) {
  std::string text = ncclGetErrorString(r);
  const char *last = ncclGetLastError(comm);
  if (last && *last)
    text += std::string(" (") + last + ")";
  return text;
}

/// Polls a non-blocking communicator after a call answered `r` until its
/// state is no longer ncclInProgress or the timeout passes (then
/// ncclInProgress is returned).
ncclResult_t settle(ncclComm_t comm, ncclResult_t r, double timeoutSeconds) {
  if (r != ncclInProgress)
    return r;
  auto start = Clock::now();
  for (;;) {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t q = ncclCommGetAsyncError(comm, &state); q != ncclSuccess)
      return q;
    if (state != ncclInProgress)
      return state;
    std::chrono::duration<double> waited = Clock::now() - start;
    if (timeoutSeconds > 0 && waited.count() > timeoutSeconds)
      return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void abortLocked(Comm &c) {
  if (c.aborted || !c.comm)
    return;
  c.aborted = true;
  ncclCommAbort(c.comm); // frees the communicator, whatever its state
  c.comm = nullptr;
}

/// The status of a call that NCCL answered `r` (after settling): a call
/// that did not complete in time is a timeout (the caller aborts once it
/// has probed which ranks are alive), an error aborts the communicator.
moe_rt_status finish(Comm &c, ncclResult_t r, const char *what) {
  r = settle(c.comm, r, c.timeoutSeconds);
  if (r == ncclSuccess)
    return ok();
  if (r == ncclInProgress)
    return fail(MOE_RT_TIMEOUT, std::string(what) + " on NCCL communicator " +
                                    c.label + " was not accepted within " +
                                    std::to_string(c.timeoutSeconds) + " s");
  std::string text = resultText(r, c.comm);
  abortLocked(c);
  return fail(MOE_RT_BACKEND_ERROR, std::string(what) + " on NCCL "
                                        "communicator " +
                                        c.label + " failed: " + text);
}

/// The stream a call runs on, or an error if `s` is not CUDA.
moe_rt_status streamFor(Comm &c, moe_rt_stream s, bool lowPriority,
                        const char *what, cudaStream_t &out) {
  out = cuda::streamOf(s, lowPriority);
  if (!out)
    return fail(MOE_RT_INVALID_ARGUMENT,
                std::string(what) + ": NCCL needs a CUDA stream");
  if (c.aborted || !c.comm)
    return fail(MOE_RT_BACKEND_ERROR, std::string(what) +
                                          ": NCCL communicator " + c.label +
                                          " was aborted after an earlier "
                                          "failure");
  return MOE_RT_OK;
}

} // namespace

moe_rt_status makeUniqueId(char id[kUniqueIdBytes]) {
  ncclUniqueId unique;
  if (ncclResult_t r = ncclGetUniqueId(&unique); r != ncclSuccess)
    return fail(MOE_RT_BACKEND_ERROR,
                std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
  std::memcpy(id, &unique, kUniqueIdBytes);
  return ok();
}

moe_rt_status init(const char id[kUniqueIdBytes], int nranks, int rank,
                   double timeoutSeconds, const std::string &label,
                   Comm **out) {
  *out = nullptr;
  auto c = std::make_unique<Comm>();
  c->timeoutSeconds = timeoutSeconds;
  c->label = label;
  ncclUniqueId unique;
  std::memcpy(&unique, id, kUniqueIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0; // poll instead of blocking: see the file comment
  config.commName = c->label.c_str();
  ncclResult_t r =
      ncclCommInitRankConfig(&c->comm, nranks, unique, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    std::string text = resultText(r, c->comm);
    if (c->comm)
      ncclCommAbort(c->comm);
    return fail(MOE_RT_BACKEND_ERROR,
                "ncclCommInitRank (" + label + "): " + text);
  }
  r = settle(c->comm, r, timeoutSeconds);
  if (r != ncclSuccess) {
    std::string text = r == ncclInProgress ? std::string("timed out after ") +
                                                 std::to_string(timeoutSeconds) +
                                                 " s waiting for every rank"
                                           : resultText(r, c->comm);
    ncclCommAbort(c->comm);
    return fail(r == ncclInProgress ? MOE_RT_TIMEOUT : MOE_RT_BACKEND_ERROR,
                "ncclCommInitRank (" + label + "): " + text);
  }
  *out = c.release();
  return ok();
}

void destroy(Comm *comm) {
  if (!comm)
    return;
  {
    std::lock_guard<std::mutex> lock(comm->mutex);
    if (!comm->aborted && comm->comm) {
      // Finalize flushes what is queued; a peer that never completes it
      // must not hang the destructor, so a slow finalize becomes an abort.
      ncclResult_t r = settle(comm->comm, ncclCommFinalize(comm->comm),
                              comm->timeoutSeconds > 0 ? comm->timeoutSeconds
                                                       : 60);
      if (r == ncclSuccess)
        ncclCommDestroy(comm->comm);
      else
        ncclCommAbort(comm->comm);
      comm->comm = nullptr;
    }
  }
  delete comm;
}

void abortComm(Comm *comm) {
  if (!comm)
    return;
  std::lock_guard<std::mutex> lock(comm->mutex);
  abortLocked(*comm);
}

std::string asyncError(Comm *comm) {
  if (!comm)
    return "";
  std::lock_guard<std::mutex> lock(comm->mutex);
  if (comm->aborted || !comm->comm)
    return "";
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm->comm, &state);
  if (r == ncclSuccess && (state == ncclSuccess || state == ncclInProgress))
    return "";
  std::string text = resultText(r != ncclSuccess ? r : state, comm->comm);
  abortLocked(*comm);
  return "NCCL communicator " + comm->label + " reported an error: " + text;
}

const std::string &label(const Comm *comm) { return comm->label; }

moe_rt_status allReduce(Comm *comm, moe_rt_stream s, float *data,
                        int64_t count) {
  std::lock_guard<std::mutex> lock(comm->mutex);
  cudaStream_t stream;
  if (moe_rt_status st = streamFor(*comm, s, true, "ncclAllReduce", stream))
    return st;
  if (count == 0)
    return ok();
  return finish(*comm,
                ncclAllReduce(data, data, size_t(count), ncclFloat, ncclSum,
                              comm->comm, stream),
                "ncclAllReduce");
}

moe_rt_status allToAll(Comm *comm, moe_rt_stream s, const float *send,
                       float *recv, const coll::PeerPlan &plan) {
  std::lock_guard<std::mutex> lock(comm->mutex);
  cudaStream_t stream;
  if (moe_rt_status st = streamFor(*comm, s, false, "all-to-all", stream))
    return st;
  // Grouped point-to-point: NCCL's all-to-all(v) idiom. Zero counts are
  // skipped on both sides (the plans agree when the ranks' counts do).
  ncclResult_t r = ncclGroupStart();
  for (size_t p = 0; r == ncclSuccess && p < plan.sendCount.size(); ++p) {
    if (plan.sendCount[p] > 0)
      r = ncclSend(send + plan.sendOffset[p], size_t(plan.sendCount[p]),
                   ncclFloat, int(p), comm->comm, stream);
    if (r == ncclSuccess && plan.recvCount[p] > 0)
      r = ncclRecv(recv + plan.recvOffset[p], size_t(plan.recvCount[p]),
                   ncclFloat, int(p), comm->comm, stream);
  }
  ncclResult_t end = ncclGroupEnd();
  return finish(*comm, r != ncclSuccess ? r : end, "ncclSend/ncclRecv group");
}

moe_rt_status allGather(Comm *comm, moe_rt_stream s, const float *send,
                        float *recv, int64_t sendCount) {
  std::lock_guard<std::mutex> lock(comm->mutex);
  cudaStream_t stream;
  if (moe_rt_status st = streamFor(*comm, s, false, "ncclAllGather", stream))
    return st;
  if (sendCount == 0)
    return ok();
  return finish(*comm,
                ncclAllGather(send, recv, size_t(sendCount), ncclFloat,
                              comm->comm, stream),
                "ncclAllGather");
}

moe_rt_status reduceScatter(Comm *comm, moe_rt_stream s, const float *send,
                            float *recv, int64_t recvCount) {
  std::lock_guard<std::mutex> lock(comm->mutex);
  cudaStream_t stream;
  if (moe_rt_status st =
          streamFor(*comm, s, false, "ncclReduceScatter", stream))
    return st;
  if (recvCount == 0)
    return ok();
  return finish(*comm,
                ncclReduceScatter(send, recv, size_t(recvCount), ncclFloat,
                                  ncclSum, comm->comm, stream),
                "ncclReduceScatter");
}

moe_rt_status send(Comm *comm, moe_rt_stream s, const void *data,
                   int64_t bytes, int peer) {
  std::lock_guard<std::mutex> lock(comm->mutex);
  cudaStream_t stream;
  if (moe_rt_status st = streamFor(*comm, s, false, "ncclSend", stream))
    return st;
  if (bytes == 0)
    return ok();
  return finish(*comm,
                ncclSend(data, size_t(bytes), ncclUint8, peer, comm->comm,
                         stream),
                "ncclSend");
}

moe_rt_status recv(Comm *comm, moe_rt_stream s, void *data, int64_t bytes,
                   int peer) {
  std::lock_guard<std::mutex> lock(comm->mutex);
  cudaStream_t stream;
  if (moe_rt_status st = streamFor(*comm, s, false, "ncclRecv", stream))
    return st;
  if (bytes == 0)
    return ok();
  return finish(*comm,
                ncclRecv(data, size_t(bytes), ncclUint8, peer, comm->comm,
                         stream),
                "ncclRecv");
}

} // namespace moe_rt::nccl
