//===- CpuShardRowsOps.h - expert sharding's variable-count collectives ---===//
//
// What src/api/ShardRowsOps.cpp queues on a CPU stream once the arguments
// are checked: counts exchange, layout (src/ShardRowsPlan.h), MPI_Iallgatherv
// or MPI_Ireduce_scatter, layout. Sizes and counts are read when the stream
// reaches the tasks, as the data is.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CPU_CPUSHARDROWSOPS_H
#define MOE_RT_SRC_CPU_CPUSHARDROWSOPS_H

#include "../ShardRowsPlan.h"

#include "moe_rt/ops.h"

namespace moe_rt::cpu {

/// `rows` is this rank's E_l x G (the gather and its vjp) or the gathered
/// E_l x S·G counts (the scatter and its vjp); `in` / `out` the expert
/// sides; gatheredRows the gather's second result (NULL otherwise).
/// `gather`: in is the rank's, out the gathered layout (all-gather-v);
/// else the other way (reduce-scatter-v).
moe_rt_status shardRows(moe_rt_stream s, moe_rt_comm comm, const char *call,
                        const shardrows::Shape &shape, bool rowsGathered,
                        bool gather, const int64_t *rows, const float *in,
                        float *out, int64_t *gatheredRows);

} // namespace moe_rt::cpu

#endif // MOE_RT_SRC_CPU_CPUSHARDROWSOPS_H
