//===- MpiCollectives.h - collectives over MPI, CPU streams -----*- C++ -*-===//
//
// What the public collectives (src/api/Collectives.cpp) queue on a CPU
// stream once their arguments are checked: the MPI call on the group's
// communicator of its traffic class (all-to-all class: a2a, all-reduce
// class: ar), run as non-blocking steps to the group's timeout
// (CollectiveSteps.h). Counts must fit MPI's int (checked here).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_MPI_MPICOLLECTIVES_H
#define MOE_RT_SRC_MPI_MPICOLLECTIVES_H

#include "../CollectivePlan.h"

#include "moe_rt/collectives.h"

#include <cstdint>

namespace moe_rt::mpi {

/// Sums `count` floats at `data` over the group, in place; on a pool, in
/// its low-priority queue (all-reduce chunks yield to the all-to-alls).
moe_rt_status allReduce(moe_rt_stream stream, moe_rt_comm comm, float *data,
                        int64_t count, const char *what);
/// An all-to-all (kind AllToAll: equal parts) or all-to-all-v of `plan`;
/// `bytes` is the shape-check signature.
moe_rt_status allToAll(moe_rt_stream stream, moe_rt_comm comm, int64_t kind,
                       int64_t bytes, const float *in, float *out,
                       const coll::PeerPlan &plan, const char *what);
/// Each rank's n floats, gathered in rank order.
moe_rt_status allGather(moe_rt_stream stream, moe_rt_comm comm,
                        const float *in, float *out, int64_t n);
/// The sum over the group of n floats per rank, each rank its own part.
moe_rt_status reduceScatter(moe_rt_stream stream, moe_rt_comm comm,
                            const float *in, float *out, int64_t n);

} // namespace moe_rt::mpi

#endif // MOE_RT_SRC_MPI_MPICOLLECTIVES_H
