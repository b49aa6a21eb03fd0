//===- CudaStreams.h - what CUDA ops need from a stream ---------*- C++ -*-===//
//
// Implemented by CudaBackend.cpp (host compiler); used by the .cu op files.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CUDA_CUDASTREAMS_H
#define MOE_RT_SRC_CUDA_CUDASTREAMS_H

#include "moe_rt/moe_rt.h"

#include <cstdint>
#include <cuda_runtime.h>
#include <string>

namespace moe_rt::cuda {

/// The CUDA stream behind a runtime stream; for a communication pool its
/// high-priority stream (all-to-alls) or, with lowPriority, its
/// low-priority one (all-reduce chunks). nullptr if `s` is not CUDA.
cudaStream_t streamOf(moe_rt_stream s, bool lowPriority = false);

/// Waits for the work queued so far on the CUDA stream streamOf(s,
/// lowPriority) (not a pool's other stream), polling the communicators the
/// stream waits on, to timeoutSeconds (<= 0: no limit); then reports a
/// raised error code, as moe_rt_stream_synchronize does.
moe_rt_status waitStream(moe_rt_stream s, bool lowPriority,
                         double timeoutSeconds);

/// The stream's error word (mapped pinned memory, device pointer) and the
/// message a code stands for: a kernel raises a code, the stream's
/// synchronize reports its message (sticky, as a failed CPU task is).
int32_t *errorWordOf(moe_rt_stream s);
int32_t registerError(moe_rt_stream s, std::string message);

/// A cuBLAS handle for the calling host thread (created once per thread).
void *cublasHandle();

} // namespace moe_rt::cuda

#endif // MOE_RT_SRC_CUDA_CUDASTREAMS_H
