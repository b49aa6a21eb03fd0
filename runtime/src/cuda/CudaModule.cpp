//===- CudaModule.cpp - the CUDA module's side of CudaModule.h ------------===//
//
// Built into libmoe_runtime_cuda.so only. The module's symbols are hidden
// (CMake's visibility preset) except moe_rt_cuda_module_open, so its
// definitions never interpose on the core's forwarding stubs of the same
// names. What the backend calls in the core (fail/ok, the all-to-alls)
// goes through the services the core handed over (the all-to-alls,
// the all-gather, the group's timeout, the last error's text).
//
//===----------------------------------------------------------------------===//

#include "CudaModule.h"

#include "../Error.h"

namespace moe_rt {
namespace {
const cuda::CudaHostServices *host = nullptr;
} // namespace

moe_rt_status fail(moe_rt_status status, std::string message) {
  return host->fail(status, std::move(message));
}

moe_rt_status ok() { return host->ok(); }

} // namespace moe_rt

extern "C" moe_rt_status moe_rt_all_to_all(moe_rt_stream stream,
                                           moe_rt_comm comm,
                                           const moe_rt_tensor *send,
                                           moe_rt_tensor *recv) {
  return moe_rt::host->allToAll(stream, comm, send, recv);
}

extern "C" moe_rt_status
moe_rt_all_to_all_v(moe_rt_stream stream, moe_rt_comm comm,
                    const moe_rt_tensor *send, const int64_t *send_rows,
                    moe_rt_tensor *recv, const int64_t *recv_rows) {
  return moe_rt::host->allToAllV(stream, comm, send, send_rows, recv,
                                 recv_rows);
}

extern "C" moe_rt_status moe_rt_all_gather(moe_rt_stream stream,
                                           moe_rt_comm comm,
                                           const moe_rt_tensor *send,
                                           moe_rt_tensor *recv) {
  return moe_rt::host->allGather(stream, comm, send, recv);
}

extern "C" moe_rt_status moe_rt_reduce_scatter(moe_rt_stream stream,
                                               moe_rt_comm comm,
                                               const moe_rt_tensor *send,
                                               moe_rt_tensor *recv) {
  return moe_rt::host->reduceScatter(stream, comm, send, recv);
}

extern "C" double moe_rt_comm_timeout(moe_rt_comm comm) {
  return moe_rt::host->commTimeout(comm);
}

extern "C" const char *moe_rt_last_error(void) {
  return moe_rt::host->lastError();
}

extern "C" __attribute__((visibility("default")))
const moe_rt::cuda::CudaModuleTable *
moe_rt_cuda_module_open(const moe_rt::cuda::CudaHostServices *services) {
  using namespace moe_rt::cuda;
  if (!services || services->abiVersion != kModuleAbiVersion)
    return nullptr;
  moe_rt::host = services;
  static const CudaModuleTable table = {
      kModuleAbiVersion,
#define MOE_RT_CUDA_ENTRY(Field, Return, Function, Params, Args) &Function,
#include "CudaEntryPoints.def"
  };
  return &table;
}
