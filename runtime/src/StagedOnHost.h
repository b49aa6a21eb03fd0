//===- StagedOnHost.h - a CPU call on host copies of CUDA tensors -*- C++ -*-===//
//
// Host work asked for on a CUDA stream (NetMoE's planner, the routing
// statistics: src/api/PlacementOps.cpp, src/stats/RoutingCounts.cpp) runs
// staged: the stream's work so far waited for, the inputs copied to the
// host, the CPU call run to completion on a CPU stream of its own, the
// outputs copied back before the call returns — so what the CUDA stream
// queues next reads them. It blocks the calling thread for the host work
// (no overlap with the stream). Public C API calls only.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_STAGEDONHOST_H
#define MOE_RT_SRC_STAGEDONHOST_H

#include "Error.h"

#include "moe_rt/moe_rt.h"

#include <functional>
#include <string>
#include <vector>

namespace moe_rt {

/// `call(hostStream, ins, outs)` on host copies of `in` (copied from the
/// device) and `out` (copied back); the first failure's status and
/// message.
inline moe_rt_status stagedOnHost(
    moe_rt_stream s, const std::vector<const moe_rt_tensor *> &in,
    const std::vector<moe_rt_tensor *> &out,
    const std::function<moe_rt_status(moe_rt_stream, moe_rt_tensor *,
                                      moe_rt_tensor *)> &call) {
  std::vector<moe_rt_tensor> hostIn(in.size()), hostOut(out.size());
  auto like = [](const moe_rt_tensor *t, moe_rt_tensor *copy) {
    *copy = moe_rt_tensor{};
    return moe_rt_tensor_create(MOE_RT_CPU, t->dtype, t->rank, t->shape, copy);
  };
  moe_rt_stream host = nullptr;
  moe_rt_status st = moe_rt_stream_synchronize(s, 0);
  for (size_t i = 0; i < in.size() && !st; ++i)
    if (!(st = like(in[i], &hostIn[i])))
      st = moe_rt_tensor_copy(&hostIn[i], in[i]);
  for (size_t i = 0; i < out.size() && !st; ++i)
    st = like(out[i], &hostOut[i]);
  if (!st)
    st = moe_rt_stream_create(MOE_RT_CPU, &host);
  if (!st)
    st = call(host, hostIn.data(), hostOut.data());
  if (!st)
    st = moe_rt_stream_synchronize(host, 0);
  for (size_t i = 0; i < out.size() && !st; ++i)
    st = moe_rt_tensor_copy(out[i], &hostOut[i]);
  std::string message = st ? moe_rt_last_error() : "";
  if (host)
    moe_rt_stream_destroy(host);
  for (std::vector<moe_rt_tensor> *v : {&hostIn, &hostOut})
    for (moe_rt_tensor &t : *v)
      if (t.data)
        moe_rt_tensor_destroy(&t);
  return st ? fail(st, message) : MOE_RT_OK;
}

} // namespace moe_rt

#endif // MOE_RT_SRC_STAGEDONHOST_H
