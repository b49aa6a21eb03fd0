//===- NcclGroups.h - the NCCL communicators a group owns -------*- C++ -*-===//
//
// With the CUDA backend, a collective on a CUDA stream runs with NCCL
// (src/cuda/NcclCollectives.cpp). What the group keeps for that lives
// here: its NCCL communicators (one per traffic class, made on first CUDA
// use, the unique id broadcast over MPI; one per peer for send / recv), the
// shape check over MPI when a call is made, and the watch a CUDA stream
// polls, which names the ranks that did not answer when NCCL work times out
// (Liveness.h).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_MPI_NCCLGROUPS_H
#define MOE_RT_SRC_MPI_NCCLGROUPS_H

#ifdef MOE_RT_HAVE_CUDA

#include "../cuda/NcclCollectives.h"
#include "Communicator.h"
#include "PointToPoint.h"

#include <functional>
#include <memory>

namespace moe_rt::mpi {

/// A collective on a CUDA stream: refuse a failed group, check signatures,
/// get the group's NCCL communicator of the kind's class, make `call` with
/// it, and let the stream watch the communicator.
moe_rt_status runNccl(moe_rt_stream stream, moe_rt_comm c, int64_t kind,
                      int64_t bytes,
                      const std::function<moe_rt_status(nccl::Comm *)> &call);

/// A send or recv on a CUDA stream: the shape check over MPI when the call
/// is made, then ncclSend / ncclRecv on the pair's communicator.
moe_rt_status runNcclP2P(moe_rt_stream stream, moe_rt_comm c,
                         std::shared_ptr<P2PTransfer> t);

/// Frees the group's NCCL communicators (the group's destructor).
void destroyNccl(moe_rt_comm_impl &c);

} // namespace moe_rt::mpi

#endif // MOE_RT_HAVE_CUDA

#endif // MOE_RT_SRC_MPI_NCCLGROUPS_H
