//===- CudaExecutor.h - device ops' executor on a CUDA stream ---*- C++ -*-===//
//
// Included by .cu files only (it launches kernels). See src/device/Device.h
// for the executor concept; tests/HostExecutor.h is its host twin. One
// executor per op call: its scratch is freed, stream-ordered, when it goes
// out of scope after the op has queued its work.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CUDA_CUDAEXECUTOR_H
#define MOE_RT_SRC_CUDA_CUDAEXECUTOR_H

#include "../device/Device.h"
#include "CudaStreams.h"

#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace moe_rt::device {

template <class Body> __global__ void forEachKernel(int64_t n, Body body) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    body(i);
}

class CudaExecutor {
public:
  /// `s` must be a CUDA stream; `lowPriority` picks a pool's low-priority
  /// stream (all-reduce chunks).
  explicit CudaExecutor(moe_rt_stream s, bool lowPriority = false);
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor &) = delete;
  CudaExecutor &operator=(const CudaExecutor &) = delete;

  template <class Body> moe_rt_status forEach(int64_t n, const Body &body) {
    if (failed_ || n <= 0)
      return failed_;
    constexpr int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535)
      blocks = 65535; // grid-stride loop covers the rest
    forEachKernel<Body>
        <<<static_cast<unsigned>(blocks), threads, 0, stream_>>>(n, body);
    return check("kernel launch", cudaGetLastError());
  }

  moe_rt_status gemm(const GemmDesc &g);
  float *scratchF32(int64_t n) {
    return static_cast<float *>(scratch(size_t(n) * sizeof(float)));
  }
  int64_t *scratchI64(int64_t n) {
    return static_cast<int64_t *>(scratch(size_t(n) * sizeof(int64_t)));
  }
  moe_rt_status copy(void *dst, const void *src, size_t bytes);
  moe_rt_status zero(void *dst, size_t bytes);
  int32_t *errorWord();
  int32_t errorCode(const char *message);
  moe_rt_status status() const { return failed_; }
  cudaStream_t stream() const { return stream_; }

private:
  void *scratch(size_t bytes);
  moe_rt_status check(const char *what, cudaError_t err);

  moe_rt_stream handle_;
  cudaStream_t stream_;
  std::vector<void *> scratch_;
  moe_rt_status failed_ = MOE_RT_OK;
};

} // namespace moe_rt::device

#endif // MOE_RT_SRC_CUDA_CUDAEXECUTOR_H
