//===- GpuSweepsNone.cpp - moe-profile built without CUDA -----------------===//

#include "GpuSweeps.h"

namespace moe_profile {

bool gpuSweepsCompiled() { return false; }

std::string runGpuSweeps(MPI_Comm, int, bool, long, long, int, int, int,
                         GpuSweeps &) {
  return "moe-profile was built without CUDA (no nvcc/NCCL at build time)";
}

} // namespace moe_profile
