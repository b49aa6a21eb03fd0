//===- GpuSweeps.h - NCCL and cuBLAS measurements --------------*- C++ -*-===//
//
// moe-profile --gpu: the same sweeps as on CPU, with NCCL collectives and
// cuBLAS SGEMM on one GPU per rank, timed with CUDA events. Compiled when
// the runtime's CUDA backend is (nvcc and NCCL present); machines without a
// GPU report that they have none.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TOOLS_MOEPROFILE_GPUSWEEPS_H
#define MOE_TOOLS_MOEPROFILE_GPUSWEEPS_H

#include <mpi.h>
#include <string>
#include <vector>

namespace moe_profile {

struct Sweep {
  std::vector<double> n, t; // sizes (bytes or flops) and times (us)
};

struct GpuSweeps {
  Sweep allToAll, allReduce, allGather, reduceScatter, gemm, memory;
};

/// Runs the GPU sweeps over `comm` on the rank's GPU `device` (modulo the
/// GPUs present): the collectives, and unless `collectivesOnly` GEMMs and
/// copies. Sizes follow docs/profile-format.md (an all-to-all counts the
/// bytes sent to other ranks). Returns an error message or "".
std::string runGpuSweeps(MPI_Comm comm, int device, bool collectivesOnly,
                         long minBytes, long maxBytes, int gemmMax, int warmup,
                         int iters, GpuSweeps &out);

/// Whether this binary was built with the GPU sweeps.
bool gpuSweepsCompiled();

} // namespace moe_profile

#endif // MOE_TOOLS_MOEPROFILE_GPUSWEEPS_H
