//===- CudaShardOps.h - all-gather / reduce-scatter along an axis -*- C++ -*-===//
//
// moe_rt_all_gather_axis / moe_rt_reduce_scatter_axis on a CUDA stream
// (src/api/ShardOps.cpp has checked the tensors and computed `a`): NCCL's
// rank-major collective on the stream, with device/ShardLayout.h's layout
// change before or after it in stream-ordered scratch.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CUDA_CUDASHARDOPS_H
#define MOE_RT_SRC_CUDA_CUDASHARDOPS_H

#include "../device/ShardLayout.h"
#include "moe_rt/collectives.h"

namespace moe_rt::cuda {

moe_rt_status allGatherAxis(moe_rt_stream s, moe_rt_comm comm,
                            const device::AxisShape &a,
                            const moe_rt_tensor *in, moe_rt_tensor *out);
moe_rt_status reduceScatterAxis(moe_rt_stream s, moe_rt_comm comm,
                                const device::AxisShape &a,
                                const moe_rt_tensor *in, moe_rt_tensor *out);

} // namespace moe_rt::cuda

#endif // MOE_RT_SRC_CUDA_CUDASHARDOPS_H
