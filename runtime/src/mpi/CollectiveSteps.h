//===- CollectiveSteps.h - MPI collectives to a deadline --------*- C++ -*-===//
//
// Non-blocking MPI collectives polled to the group's timeout, so that no
// rank waits forever on a dead or stuck peer (FlowMoE App. K.3); with shape
// checks, ranks first exchange each collective's kind and size and report
// a mismatch instead of corrupting memory or hanging.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_MPI_COLLECTIVESTEPS_H
#define MOE_RT_SRC_MPI_COLLECTIVESTEPS_H

#include "Communicator.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace moe_rt::mpi {

/// "" if every rank issued (kind, bytes) (CollectivePlan.h's kinds), else
/// the first difference.
std::string signatureMismatch(const moe_rt_comm_impl &c, int64_t kind,
                              int64_t bytes, const std::vector<int64_t> &all);

/// Queues the collective that `post` starts on `comm` (one of the group's
/// MPI communicators) as non-blocking steps on `stream`: [signature
/// exchange,] post, test — each bounded by the group's timeout. On a solo
/// group (no MPI, one rank) `local` runs instead: what the collective does
/// when the group is one rank (a copy, or nothing).
moe_rt_status enqueueCollective(moe_rt_stream stream, moe_rt_comm c,
                                MPI_Comm comm, int64_t kind, int64_t bytes,
                                bool lowPriority,
                                std::function<int(MPI_Request *)> post,
                                std::function<void()> local);

/// Waits for a non-blocking MPI call the host thread made (the CUDA path's
/// id broadcast and shape check) up to the communicator's timeout.
/// With peer >= 0 it is a point-to-point exchange and a timeout names the
/// peer instead of probing the group.
moe_rt_status waitHost(moe_rt_comm_impl &c, MPI_Request &request,
                       const std::string &what, int peer = -1);

} // namespace moe_rt::mpi

#endif // MOE_RT_SRC_MPI_COLLECTIVESTEPS_H
