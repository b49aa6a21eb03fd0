//===- CudaShardOps.cu - all-gather / reduce-scatter along an axis on a GPU ===//
//
// The same steps as the CPU's (src/api/ShardOps.cpp), on the stream: the
// layout bodies of device/ShardLayout.h in CudaExecutor's scratch (freed
// stream-ordered when the call returns, after the collective that uses it
// was queued) around the group's NCCL all-gather / reduce-scatter, which
// the core runs (CudaHostServices).
//
//===----------------------------------------------------------------------===//

#include "CudaShardOps.h"

#include "CudaExecutor.h"

namespace moe_rt::cuda {

using device::CudaExecutor;

namespace {
moe_rt_tensor flatView(float *data, int64_t n) {
  moe_rt_tensor t{};
  t.data = data;
  t.rank = 1;
  t.shape[0] = n;
  t.dtype = MOE_RT_F32;
  t.backend = MOE_RT_CUDA;
  return t;
}
} // namespace

moe_rt_status allGatherAxis(moe_rt_stream s, moe_rt_comm comm,
                            const device::AxisShape &a,
                            const moe_rt_tensor *in, moe_rt_tensor *out) {
  if (a.outer == 1)
    return moe_rt_all_gather(s, comm, in, out);
  CudaExecutor ex(s);
  float *buffer = ex.scratchF32(a.gatheredSize());
  if (ex.status())
    return ex.status();
  moe_rt_tensor view = flatView(buffer, a.gatheredSize());
  if (moe_rt_status st = moe_rt_all_gather(s, comm, in, &view))
    return st;
  return device::rankMajorToAxis(ex, a, buffer,
                                 static_cast<float *>(out->data));
}

moe_rt_status reduceScatterAxis(moe_rt_stream s, moe_rt_comm comm,
                                const device::AxisShape &a,
                                const moe_rt_tensor *in, moe_rt_tensor *out) {
  if (a.outer == 1)
    return moe_rt_reduce_scatter(s, comm, in, out);
  CudaExecutor ex(s);
  float *buffer = ex.scratchF32(a.gatheredSize());
  if (ex.status())
    return ex.status();
  if (moe_rt_status st = device::axisToRankMajor(
          ex, a, static_cast<const float *>(in->data), buffer))
    return st;
  moe_rt_tensor view = flatView(buffer, a.gatheredSize());
  return moe_rt_reduce_scatter(s, comm, &view, out);
}

} // namespace moe_rt::cuda
