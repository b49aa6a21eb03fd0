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
#include <memory>
#include <vector>

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

/// Dropless routing (src/cpu/CpuVarRoutingOps.cpp) moves data whose sizes
/// earlier tasks of the same stream compute, so these read their sizes
/// when the stream reaches them, not when they are queued.
/// Each rank's n int64s at `in` (routing counts), gathered in rank order.
moe_rt_status allGatherCounts(moe_rt_stream stream, moe_rt_comm comm,
                              const int64_t *in, int64_t *out, int64_t n);
/// An all-to-all-v of `*plan`, which an earlier task on `stream` fills
/// (counts in floats; MPI's int range checked when it is posted).
moe_rt_status allToAllPlanned(moe_rt_stream stream, moe_rt_comm comm,
                              std::shared_ptr<const coll::PeerPlan> plan,
                              const float *in, float *out);

/// Per-rank float counts and offsets of an all-gather-v / reduce-scatter-v
/// (expert sharding's variable-count collectives, src/cpu/CpuShardRowsOps.cpp),
/// filled by an earlier task on the stream.
struct VPlan {
  std::vector<int64_t> count, offset;
};
/// MPI_Iallgatherv: this rank's plan.count[rank] floats at `in`, every
/// rank's at out + plan.offset[g].
moe_rt_status allGatherVPlanned(moe_rt_stream stream, moe_rt_comm comm,
                                std::shared_ptr<const VPlan> plan,
                                const float *in, float *out);
/// MPI_Ireduce_scatter: `in` holds rank g's part at plan.offset[g]
/// (plan.count[g] floats); `out` gets this rank's part summed over the
/// group.
moe_rt_status reduceScatterVPlanned(moe_rt_stream stream, moe_rt_comm comm,
                                    std::shared_ptr<const VPlan> plan,
                                    const float *in, float *out);

} // namespace moe_rt::mpi

#endif // MOE_RT_SRC_MPI_MPICOLLECTIVES_H
