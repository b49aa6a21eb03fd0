//===- NoCuda.cpp - the CUDA backend when built without nvcc --------------===//
//
// Linked instead of CudaBackend.cpp when CMake finds no CUDA compiler: the
// CUDA entry points answer MOE_RT_UNAVAILABLE with a reason.

#include "../Backend.h"
#include "../Error.h"

namespace moe_rt {
namespace {
moe_rt_status unavailable(const char *what) {
  return fail(MOE_RT_UNAVAILABLE,
              std::string(what) +
                  ": the runtime was built without CUDA (no nvcc at build "
                  "time)");
}
} // namespace

moe_rt_status createCudaStream(std::unique_ptr<StreamImpl> &) {
  return unavailable("moe_rt_stream_create");
}
moe_rt_status createCudaEvent(std::unique_ptr<EventImpl> &) {
  return unavailable("moe_rt_event_create");
}
moe_rt_status cudaAllocZeroed(size_t, void **) {
  return unavailable("moe_rt_tensor_create");
}
moe_rt_status cudaFree(void *) { return unavailable("moe_rt_tensor_destroy"); }
moe_rt_status cudaScale(moe_rt_stream_impl *, float *, int64_t, float) {
  return unavailable("moe_rt_tensor_scale");
}
moe_rt_status createCudaPoolStream(std::unique_ptr<StreamImpl> &) {
  return unavailable("moe_rt_stream_create_pool_on");
}
moe_rt_status cudaCopyBytes(void *, moe_rt_backend, const void *,
                            moe_rt_backend, size_t) {
  return unavailable("moe_rt_tensor_copy");
}
moe_rt_status cudaZeroBytes(void *, size_t) {
  return unavailable("zeroing a CUDA buffer");
}
// No CUDA stream exists to watch.
void watchCudaStream(moe_rt_stream_impl *, std::weak_ptr<CommWatch>) {}

} // namespace moe_rt

extern "C" int moe_rt_cuda_compiled(void) { return 0; }
extern "C" int moe_rt_cuda_device_count(void) { return 0; }
extern "C" moe_rt_status moe_rt_cuda_select_device(int) {
  return moe_rt::unavailable("moe_rt_cuda_select_device");
}
extern "C" moe_rt_status moe_rt_cuda_library_versions(int *, int *) {
  return moe_rt::unavailable("moe_rt_cuda_library_versions");
}
