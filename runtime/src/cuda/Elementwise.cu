//===- Elementwise.cu - elementwise CUDA kernels --------------------------===//

#include "CudaKernels.h"

namespace moe_rt {
namespace {

__global__ void scaleKernel(float *data, int64_t n, float factor) {
  // Grid-stride loop: any n with a bounded grid.
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    data[i] *= factor;
}

} // namespace

cudaError_t launchScale(float *data, int64_t n, float factor,
                        cudaStream_t stream) {
  if (n <= 0)
    return cudaSuccess;
  constexpr int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535)
    blocks = 65535;
  scaleKernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(data, n,
                                                                     factor);
  return cudaGetLastError();
}

} // namespace moe_rt
