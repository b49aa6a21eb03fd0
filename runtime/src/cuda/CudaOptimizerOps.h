//===- CudaOptimizerOps.h - optimizer ops on a CUDA stream ------*- C++ -*-===//
//
// The CUDA side of src/api/OptimizerOps.cpp: src/device/OptimizerOps.h's
// templates on a CudaExecutor (device pointers, sizes checked by the
// caller).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CUDA_CUDAOPTIMIZEROPS_H
#define MOE_RT_SRC_CUDA_CUDAOPTIMIZEROPS_H

#include "../device/OptimizerOps.h"

#include "moe_rt/moe_rt.h"

namespace moe_rt::cuda {

moe_rt_status adamw(moe_rt_stream s, int64_t n,
                    const device::optim::AdamWBody &body);
moe_rt_status sgdMomentum(moe_rt_stream s, int64_t n,
                          const device::optim::SgdMomentumBody &body);
moe_rt_status sumSquares(moe_rt_stream s, int64_t n, const float *x,
                         bool accumulate, float *out);
moe_rt_status clipCoef(moe_rt_stream s, const float *sumSq, double maxNorm,
                       float *out);

} // namespace moe_rt::cuda

#endif // MOE_RT_SRC_CUDA_CUDAOPTIMIZEROPS_H
