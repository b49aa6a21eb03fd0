//===- CudaKernels.h - launchers for the runtime's CUDA kernels -*- C++ -*-===//
#ifndef MOE_RT_SRC_CUDA_CUDAKERNELS_H
#define MOE_RT_SRC_CUDA_CUDAKERNELS_H

#include <cstdint>
#include <cuda_runtime.h>

namespace moe_rt {

/// data[i] *= factor for i < n, on `stream` (loss scaling by 1/R, FlowMoE
/// App. H; gradient averaging over data-parallel ranks).
cudaError_t launchScale(float *data, int64_t n, float factor,
                        cudaStream_t stream);

} // namespace moe_rt

#endif // MOE_RT_SRC_CUDA_CUDAKERNELS_H
