//===- AllReduceGroups.h - all-reduces coalesced into one -------*- C++ -*-===//
//
// moe.all_reduce of several gradients is one task of the schedule, charged
// one collective start-up (alpha) by the cost model; issuing one MPI
// all-reduce per tensor paid alpha per tensor (18 per step on the example
// trainer, ~0.5 ms each over the emulated cluster's TCP link,
// docs/measured-policies.md). Between moe_rt_all_reduce_group_begin and
// _end, moe_rt_all_reduce_into on a CPU stream is deferred here and the
// group runs as one all-reduce of the ranges packed together.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_API_ALLREDUCEGROUPS_H
#define MOE_RT_SRC_API_ALLREDUCEGROUPS_H

#include "moe_rt/ops.h"

namespace moe_rt {

/// True when `s` has an open group: the caller's all-reduce (already
/// checked) joined it, to run at the group's end.
bool deferToGroup(moe_rt_stream s, moe_rt_comm comm, const moe_rt_tensor *src,
                  moe_rt_tensor *out, int64_t offsetBytes, int64_t sizeBytes);

} // namespace moe_rt

#endif // MOE_RT_SRC_API_ALLREDUCEGROUPS_H
