//===- CudaExecutor.cu - the non-template half of CudaExecutor ------------===//

#include "CudaExecutor.h"

#include "../Error.h"

#include <cublas_v2.h>

namespace moe_rt::device {

CudaExecutor::CudaExecutor(moe_rt_stream s, bool lowPriority)
    : handle_(s), stream_(cuda::streamOf(s, lowPriority)) {
  if (!stream_)
    failed_ = fail(MOE_RT_INVALID_ARGUMENT, "not a CUDA stream");
}

CudaExecutor::~CudaExecutor() {
  // Stream-ordered: freed once the work queued before has run.
  for (void *p : scratch_)
    cudaFreeAsync(p, stream_);
}

moe_rt_status CudaExecutor::check(const char *what, cudaError_t err) {
  if (err != cudaSuccess && !failed_)
    failed_ = fail(MOE_RT_BACKEND_ERROR,
                   std::string(what) + ": " + cudaGetErrorString(err));
  return failed_;
}

void *CudaExecutor::scratch(size_t bytes) {
  if (failed_)
    return nullptr;
  void *p = nullptr;
  if (cudaError_t err = cudaMallocAsync(&p, bytes ? bytes : 1, stream_)) {
    failed_ = fail(MOE_RT_OUT_OF_MEMORY,
                   "cudaMallocAsync(" + std::to_string(bytes) +
                       " bytes): " + cudaGetErrorString(err));
    return nullptr;
  }
  scratch_.push_back(p);
  if (check("cudaMemsetAsync", cudaMemsetAsync(p, 0, bytes, stream_)))
    return nullptr;
  return p;
}

moe_rt_status CudaExecutor::copy(void *dst, const void *src, size_t bytes) {
  if (failed_ || !bytes)
    return failed_;
  return check("cudaMemcpyAsync",
               cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                               stream_));
}

moe_rt_status CudaExecutor::zero(void *dst, size_t bytes) {
  if (failed_ || !bytes)
    return failed_;
  return check("cudaMemsetAsync", cudaMemsetAsync(dst, 0, bytes, stream_));
}

int32_t *CudaExecutor::errorWord() { return cuda::errorWordOf(handle_); }

int32_t CudaExecutor::errorCode(const char *message) {
  return cuda::registerError(handle_, message);
}

moe_rt_status CudaExecutor::gemm(const GemmDesc &g) {
  if (failed_ || g.m == 0 || g.n == 0 || g.batch == 0)
    return failed_;
  auto handle = static_cast<cublasHandle_t>(cuda::cublasHandle());
  if (!handle)
    return failed_ = fail(MOE_RT_BACKEND_ERROR, "cublasCreate failed");
  if (cublasSetStream(handle, stream_) != CUBLAS_STATUS_SUCCESS)
    return failed_ = fail(MOE_RT_BACKEND_ERROR, "cublasSetStream failed");
  ColumnMajorGemm c = toColumnMajor(g);
  if (!cublasAccepts(c))
    return failed_ = fail(MOE_RT_INVALID_ARGUMENT,
                          "a GEMM descriptor cuBLAS would refuse (m " +
                              std::to_string(c.m) + ", n " +
                              std::to_string(c.n) + ", k " +
                              std::to_string(c.k) + ")");
  // Full fp32 (no TF32): the step must match the CPU backend to fp32
  // tolerance.
  cublasStatus_t st = cublasGemmStridedBatchedEx(
      handle, c.transFirst ? CUBLAS_OP_T : CUBLAS_OP_N,
      c.transSecond ? CUBLAS_OP_T : CUBLAS_OP_N, int(c.m), int(c.n), int(c.k),
      &c.alpha, c.first, CUDA_R_32F, int(c.ldFirst), c.strideFirst, c.second,
      CUDA_R_32F, int(c.ldSecond), c.strideSecond, &c.beta, c.c, CUDA_R_32F,
      int(c.ldc), c.strideC, int(c.batch), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    return failed_ = fail(MOE_RT_BACKEND_ERROR,
                          std::string("cublasGemmStridedBatchedEx: ") +
                              cublasGetStatusString(st));
  return MOE_RT_OK;
}

} // namespace moe_rt::device
