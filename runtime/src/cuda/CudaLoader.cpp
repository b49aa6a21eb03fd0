//===- CudaLoader.cpp - the core's side of CudaModule.h -------------------===//
//
// Opens libmoe_runtime_cuda.so on the first call of any CUDA entry point
// and forwards every call to it (CudaEntryPoints.def). Until then no CUDA
// library is mapped; when the module (or a library it needs: cudart,
// cuBLAS, NCCL) cannot be loaded, each entry point answers as the CPU-only
// build does: MOE_RT_UNAVAILABLE with the loader's reason, 0 devices.
//
//===----------------------------------------------------------------------===//

#include "CudaModule.h"

#include "../Error.h"

#include <cstdlib>
#include <dlfcn.h>
#include <mutex>

#ifndef MOE_RT_CUDA_MODULE_PATH
#define MOE_RT_CUDA_MODULE_PATH "libmoe_runtime_cuda.so"
#endif

namespace moe_rt::cuda {
namespace {

moe_rt_status hostFail(moe_rt_status status, std::string message) {
  return moe_rt::fail(status, std::move(message));
}
moe_rt_status hostOk() { return moe_rt::ok(); }

const CudaHostServices services = {kModuleAbiVersion,
                                   hostFail,
                                   hostOk,
                                   moe_rt_all_to_all,
                                   moe_rt_all_to_all_v,
                                   moe_rt_all_gather,
                                   moe_rt_comm_timeout,
                                   moe_rt_last_error,
                                   moe_rt_reduce_scatter};

struct Loaded {
  const CudaModuleTable *table = nullptr;
  std::string why; // set when table is null
};

/// dlopen's candidates in order; the first that opens is used.
std::string openModule(void *&handle) {
  std::string why;
  const char *env = std::getenv("MOE_RT_CUDA_MODULE");
  for (const char *path : {env, MOE_RT_CUDA_MODULE_PATH,
                           "libmoe_runtime_cuda.so"}) {
    if (!path || !*path)
      continue;
    // RTLD_LOCAL: cudart's and NCCL's symbols stay out of the process's
    // global scope (nothing else resolves against them).
    if ((handle = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
      return "";
    why += std::string(why.empty() ? "" : "; ") + dlerror();
    if (path == env)
      break; // an explicit choice is not second-guessed
  }
  return why;
}

const Loaded &load() {
  static Loaded loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    void *handle = nullptr;
    if (std::string why = openModule(handle); !handle) {
      loaded.why = "the CUDA backend module could not be loaded: " + why;
      return;
    }
    using Open = decltype(&moe_rt_cuda_module_open);
    auto open = reinterpret_cast<Open>(dlsym(handle, "moe_rt_cuda_module_open"));
    loaded.table = open ? open(&services) : nullptr;
    if (!loaded.table)
      loaded.why = "the CUDA backend module is from another build (ABI "
                   "version mismatch or no moe_rt_cuda_module_open)";
  });
  return loaded;
}

/// What an entry point returns when the module is not there.
template <typename R> struct Unloaded;
template <> struct Unloaded<moe_rt_status> {
  static moe_rt_status value(const char *what) {
    return fail(MOE_RT_UNAVAILABLE, std::string(what) + ": " + load().why);
  }
};
template <> struct Unloaded<int> {
  static int value(const char *) { return 0; }
};
template <> struct Unloaded<void> {
  static void value(const char *) {}
};
template <> struct Unloaded<std::string> {
  static std::string value(const char *) { return ""; }
};
template <> struct Unloaded<const std::string &> {
  static const std::string &value(const char *) {
    static const std::string empty;
    return empty;
  }
};

} // namespace
} // namespace moe_rt::cuda

// The forwarding stubs: one per line of CudaEntryPoints.def.
#define MOE_RT_CUDA_ENTRY(Field, Return, Function, Params, Args)               \
  Return Function Params {                                                     \
    const auto *module_ = moe_rt::cuda::load().table;                          \
    if (!module_)                                                              \
      return moe_rt::cuda::Unloaded<Return>::value(#Function);                 \
    return module_->Field Args;                                                \
  }
#include "CudaEntryPoints.def"

extern "C" int moe_rt_cuda_compiled(void) { return 1; }
