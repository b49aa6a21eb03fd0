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

// adamw, sgdMomentum, sumSquares, clipCoef: one declaration set for
// both backends.
#include "../device/OptimizerEntryPoints.inc"

} // namespace moe_rt::cuda

#endif // MOE_RT_SRC_CUDA_CUDAOPTIMIZEROPS_H
