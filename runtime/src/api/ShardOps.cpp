//===- ShardOps.cpp - all-gather / reduce-scatter along an axis -----------===//
//
// moe_rt_all_gather_axis and moe_rt_reduce_scatter_axis (shard.all_gather /
// shard.reduce_scatter; FSMoE's expert-sharding collectives): checks, then
// the group's rank-major collective (moe_rt_all_gather /
// moe_rt_reduce_scatter) with the layout change of device/ShardLayout.h
// around it, as tasks on the same stream — on the CPU here, on a GPU in
// src/cuda/CudaShardOps.cu. With nothing before the axis (outer = 1) the
// rank-major buffer is the axis layout and the collective runs in place.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/ops.h"

#include "../Error.h"
#include "../TensorAccess.h"
#include "../cpu/CpuTasks.h"
#include "../device/ShardLayout.h"
#include "OnCuda.h"

#if MOE_RT_HAVE_CUDA
#include "../cuda/CudaShardOps.h"
#endif

#include <memory>
#include <string>
#include <vector>

using namespace moe_rt;
using device::AxisShape;

namespace {

/// `part` is the rank's tensor, `whole` the gathered one: same rank and
/// dimensions except `axis`, where whole's is G times part's.
moe_rt_status axisChecks(const char *call, moe_rt_stream s, moe_rt_comm comm,
                         int64_t axis, const moe_rt_tensor *part,
                         const moe_rt_tensor *whole, AxisShape &a) {
  auto bad = [&](const std::string &why) {
    return fail(MOE_RT_INVALID_ARGUMENT, std::string(call) + ": " + why);
  };
  if (!s || !comm || !part || !whole || !part->data || !whole->data)
    return bad("NULL argument");
  moe_rt_backend on = backendOf(s);
  for (const moe_rt_tensor *t : {part, whole})
    if (t->dtype != MOE_RT_F32 || t->backend != on ||
        moe_rt_tensor_numel(t) < 0)
      return bad(std::string("needs F32 tensors in ") +
                 (on == MOE_RT_CUDA ? "CUDA" : "CPU") + " memory");
  if (axis < 0 || axis >= part->rank || part->rank != whole->rank)
    return bad("axis " + std::to_string(axis) + " is not a dimension of both "
               "tensors (ranks " + std::to_string(part->rank) + ", " +
               std::to_string(whole->rank) + ")");
  a.group = moe_rt_comm_size(comm);
  a.outer = a.inner = 1;
  for (int i = 0; i < part->rank; ++i) {
    int64_t expected = i == axis ? part->shape[i] * a.group : part->shape[i];
    if (whole->shape[i] != expected)
      return bad("dimension " + std::to_string(i) + " is " +
                 std::to_string(whole->shape[i]) + ", expected " +
                 std::to_string(expected) + " (the group has " +
                 std::to_string(a.group) + " ranks)");
    if (i < axis)
      a.outer *= part->shape[i];
    else if (i > axis)
      a.inner *= part->shape[i];
  }
  a.part = part->shape[axis];
  return MOE_RT_OK;
}

/// A rank-major buffer on the CPU, shared by the tasks of one call.
struct Buffer {
  std::vector<float> data;
  moe_rt_tensor view{};
  explicit Buffer(int64_t n) : data(n, 0.0f) {
    view.data = data.data();
    view.rank = 1;
    view.shape[0] = n;
    view.dtype = MOE_RT_F32;
    view.backend = MOE_RT_CPU;
  }
};

} // namespace

extern "C" {

moe_rt_status moe_rt_all_gather_axis(moe_rt_stream s, moe_rt_comm comm,
                                     int64_t axis, const moe_rt_tensor *in,
                                     moe_rt_tensor *out) {
  AxisShape a{};
  if (moe_rt_status st = axisChecks("moe_rt_all_gather_axis", s, comm, axis,
                                    in, out, a))
    return st;
  MOE_RT_ON_CUDA(s, cuda::allGatherAxis(s, comm, a, in, out));
  if (a.outer == 1)
    return moe_rt_all_gather(s, comm, in, out);
  auto buffer = std::make_shared<Buffer>(a.gatheredSize());
  if (moe_rt_status st = moe_rt_all_gather(s, comm, in, &buffer->view))
    return st;
  float *dst = f32(out);
  return cpu::task(s, [buffer, a, dst] {
    device::RankMajorToAxis body{a, buffer->data.data(), dst};
    for (int64_t i = 0; i < a.gatheredSize(); ++i)
      body(i);
  });
}

moe_rt_status moe_rt_reduce_scatter_axis(moe_rt_stream s, moe_rt_comm comm,
                                         int64_t axis, const moe_rt_tensor *in,
                                         moe_rt_tensor *out) {
  AxisShape a{};
  if (moe_rt_status st = axisChecks("moe_rt_reduce_scatter_axis", s, comm,
                                    axis, out, in, a))
    return st;
  MOE_RT_ON_CUDA(s, cuda::reduceScatterAxis(s, comm, a, in, out));
  if (a.outer == 1)
    return moe_rt_reduce_scatter(s, comm, in, out);
  auto buffer = std::make_shared<Buffer>(a.gatheredSize());
  const float *src = f32(in);
  if (moe_rt_status st = cpu::task(s, [buffer, a, src] {
        device::AxisToRankMajor body{a, src, buffer->data.data()};
        for (int64_t i = 0; i < a.gatheredSize(); ++i)
          body(i);
      }))
    return st;
  if (moe_rt_status st = moe_rt_reduce_scatter(s, comm, &buffer->view, out))
    return st;
  // The buffer lives until the collective that reads it has run.
  return cpu::task(s, [buffer] {});
}

} // extern "C"
