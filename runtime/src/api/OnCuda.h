//===- OnCuda.h - sending an op to the CUDA backend -------------*- C++ -*-===//
//
// Every op of moe_rt/ops.h checks its operands, then runs on its stream's
// backend: the CPU backend's entry points (src/cpu/CpuOps.h), or the CUDA
// ones (src/cuda: CudaDenseOps.h, CudaRoutingOps.h), which take the same
// checked sizes. Operands must live on the stream's backend.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_API_ONCUDA_H
#define MOE_RT_API_ONCUDA_H

#include "../Backend.h"
#include "../Error.h"

namespace moe_rt {

/// The backend a stream runs on (CPU for NULL, which the checks refuse).
inline moe_rt_backend backendOf(moe_rt_stream s) {
  return s && s->impl ? s->impl->backend() : MOE_RT_CPU;
}

} // namespace moe_rt

/// `return call` when the op's stream is a CUDA stream (`call` is one of
/// src/cuda's entry points, made after the op's checks passed). Without the
/// CUDA backend no CUDA stream can be created; the branch then only guards.
#if MOE_RT_HAVE_CUDA
#define MOE_RT_ON_CUDA(s, call)                                                \
  if (::moe_rt::backendOf(s) == MOE_RT_CUDA)                                   \
  return call
#else
#define MOE_RT_ON_CUDA(s, call)                                                \
  if (::moe_rt::backendOf(s) == MOE_RT_CUDA)                                   \
  return ::moe_rt::fail(MOE_RT_UNAVAILABLE,                                    \
                        "the runtime was built without CUDA")
#endif

#endif // MOE_RT_API_ONCUDA_H
