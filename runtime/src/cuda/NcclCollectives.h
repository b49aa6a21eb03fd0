//===- NcclCollectives.h - NCCL communicators and calls ---------*- C++ -*-===//
//
// The CUDA side of include/moe_rt/collectives.h, implemented by
// NcclCollectives.cpp (host compiler, linked with NCCL). No NCCL or MPI
// types here: src/mpi owns the group (NcclGroups.cpp: its MPI
// communicators broadcast the unique id and run the liveness probe) and
// calls these with plain values. Every communicator is non-blocking
// (ncclConfig_t::blocking = 0): each call polls the communicator's state to
// a deadline instead of blocking inside NCCL, so a dead peer surfaces as a
// status, and ncclCommAbort can always be called.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CUDA_NCCLCOLLECTIVES_H
#define MOE_RT_SRC_CUDA_NCCLCOLLECTIVES_H

#include "../CollectivePlan.h"
#include "moe_rt/moe_rt.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace moe_rt::nccl {

/// sizeof(ncclUniqueId), checked by a static_assert in the .cpp.
constexpr size_t kUniqueIdBytes = 128;

/// One NCCL communicator (opaque).
struct Comm;

/// ncclGetUniqueId (rank 0 of a group calls it; the others receive it).
moe_rt_status makeUniqueId(char id[kUniqueIdBytes]);
/// ncclCommInitRankConfig, non-blocking, on the calling thread's current
/// device; waits up to timeoutSeconds (<= 0: no limit) for every rank to
/// join. `label` names the communicator in messages (and in NCCL's logs).
moe_rt_status init(const char id[kUniqueIdBytes], int nranks, int rank,
                   double timeoutSeconds, const std::string &label,
                   Comm **out);
/// Finalizes and frees; a communicator that failed or does not quiesce
/// within its timeout is aborted instead. Accepts nullptr.
void destroy(Comm *comm);
/// ncclCommAbort: stops the communicator's kernels (they would otherwise
/// spin forever on a dead peer). Later calls on it fail. Idempotent.
void abortComm(Comm *comm);
/// "" while healthy, else the asynchronous error (a peer's connection
/// closed, a remote error); the communicator is then aborted.
std::string asyncError(Comm *comm);
const std::string &label(const Comm *comm);

/// The calls, queued on CUDA stream `s` (a pool: the all-reduce on its
/// low-priority stream, the rest on its high-priority one). F32 device
/// pointers; counts in elements. MOE_RT_TIMEOUT when NCCL did not accept
/// the call within the communicator's timeout (the caller probes liveness
/// and aborts).
moe_rt_status allReduce(Comm *comm, moe_rt_stream s, float *data,
                        int64_t count);
moe_rt_status allToAll(Comm *comm, moe_rt_stream s, const float *send,
                       float *recv, const coll::PeerPlan &plan);
moe_rt_status allGather(Comm *comm, moe_rt_stream s, const float *send,
                        float *recv, int64_t sendCount);
moe_rt_status reduceScatter(Comm *comm, moe_rt_stream s, const float *send,
                            float *recv, int64_t recvCount);
/// Point-to-point on the high-priority stream: `bytes` bytes to / from
/// `peer` (its rank in `comm`, a two-rank pair communicator; see
/// src/mpi/NcclGroups.cpp). ncclSend waits on the stream until the peer's
/// ncclRecv matches it. Zero bytes enqueue nothing (both sides agree on
/// the size when shape checks are on).
moe_rt_status send(Comm *comm, moe_rt_stream s, const void *data,
                   int64_t bytes, int peer);
moe_rt_status recv(Comm *comm, moe_rt_stream s, void *data, int64_t bytes,
                   int peer);

} // namespace moe_rt::nccl

#endif // MOE_RT_SRC_CUDA_NCCLCOLLECTIVES_H
