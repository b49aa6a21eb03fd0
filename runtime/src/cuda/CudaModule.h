//===- CudaModule.h - the CUDA backend as a module opened on demand -*- C++ -*-===//
//
// The CUDA backend (src/cuda) links cudart, cuBLAS, cuBLASLt and NCCL:
// loading them costs ~0.4 s and ~265 MiB per process, and a CPU run never
// calls them. So the backend is built as its own shared object,
// libmoe_runtime_cuda.so, which the core (libmoe_runtime.a) opens with
// dlopen the first time a CUDA entry point is called (a CUDA stream,
// event, tensor or device query); a CPU run neither loads those libraries
// nor needs them installed.
//
// The two sides meet in two tables, both listed once in
// CudaEntryPoints.def: the module hands the core a CudaModuleTable (its
// entry points), and the core hands the module CudaHostServices (what the
// backend calls back into the core: the thread's last-error message lives
// in the core, and the CUDA dispatch/combine run the core's collectives).
//
// Where the module is: $MOE_RT_CUDA_MODULE if set, else the path the build
// wrote it to (MOE_RT_CUDA_MODULE_PATH), else the dynamic linker's search
// for libmoe_runtime_cuda.so (LD_LIBRARY_PATH, an installed runtime).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CUDA_CUDAMODULE_H
#define MOE_RT_SRC_CUDA_CUDAMODULE_H

#include "../Backend.h"
#include "moe_rt/collectives.h"
#include "CudaDenseOps.h"
#include "CudaOptimizerOps.h"
#include "CudaRoutingOps.h"
#include "CudaShardOps.h"
#include "CudaVarRoutingOps.h"
#include "NcclCollectives.h"

#include <memory>
#include <string>

namespace moe_rt::cuda {

/// Bumped whenever either table changes, so that a stale module from an
/// older build is refused by name rather than called with the wrong layout.
constexpr int kModuleAbiVersion = 4;

struct CudaModuleTable {
  int abiVersion;
#define MOE_RT_CUDA_ENTRY(Field, Return, Function, Params, Args)               \
  Return(*Field) Params;
#include "CudaEntryPoints.def"
};

struct CudaHostServices {
  int abiVersion;
  moe_rt_status (*fail)(moe_rt_status status, std::string message);
  moe_rt_status (*ok)();
  moe_rt_status (*allToAll)(moe_rt_stream stream, moe_rt_comm comm,
                            const moe_rt_tensor *send, moe_rt_tensor *recv);
  moe_rt_status (*allToAllV)(moe_rt_stream stream, moe_rt_comm comm,
                             const moe_rt_tensor *send,
                             const int64_t *sendRows, moe_rt_tensor *recv,
                             const int64_t *recvRows);
  // The dropless ops (CudaVarRoutingOps.cu): counts all-gathered, the
  // group's timeout for the host's read of them, a deferred error's text.
  moe_rt_status (*allGather)(moe_rt_stream stream, moe_rt_comm comm,
                             const moe_rt_tensor *send, moe_rt_tensor *recv);
  double (*commTimeout)(moe_rt_comm comm);
  const char *(*lastError)();
  // The expert-sharding reduce-scatter (CudaShardOps.cu).
  moe_rt_status (*reduceScatter)(moe_rt_stream stream, moe_rt_comm comm,
                                 const moe_rt_tensor *send,
                                 moe_rt_tensor *recv);
};

} // namespace moe_rt::cuda

/// The module's one exported symbol: its entry points, given the core's
/// services (kept for the life of the process; the module is never closed).
extern "C" const moe_rt::cuda::CudaModuleTable *
moe_rt_cuda_module_open(const moe_rt::cuda::CudaHostServices *host);

#endif // MOE_RT_SRC_CUDA_CUDAMODULE_H
