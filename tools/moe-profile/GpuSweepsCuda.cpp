//===- GpuSweepsCuda.cpp - NCCL and cuBLAS measurements -------------------===//
//
// Host code over cudart, NCCL and cuBLAS. nccl-tests style: per size, warm
// up, then time `iters` launches with CUDA events on the rank's stream and
// keep the median of the slowest rank. The all-to-all is grouped
// ncclSend/ncclRecv (NCCL has no all-to-all primitive).
//
//===----------------------------------------------------------------------===//

#include "GpuSweeps.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <functional>

namespace moe_profile {
namespace {

struct Context {
  MPI_Comm comm;
  int rank = 0, size = 1;
  cudaStream_t stream = nullptr;
  ncclComm_t nccl = nullptr;
  cublasHandle_t blas = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
};

std::string check(cudaError_t e, const char *what) {
  return e == cudaSuccess ? ""
                          : std::string(what) + ": " + cudaGetErrorString(e);
}
std::string check(ncclResult_t e, const char *what) {
  return e == ncclSuccess ? ""
                          : std::string(what) + ": " + ncclGetErrorString(e);
}

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string timeOp(Context &c, int warmup, int iters,
                   const std::function<std::string()> &op, double &us) {
  for (int i = 0; i < warmup; ++i)
    if (std::string e = op(); !e.empty())
      return e;
  std::vector<double> samples;
  for (int i = 0; i < iters; ++i) {
    MPI_Barrier(c.comm);
    cudaEventRecord(c.start, c.stream);
    if (std::string e = op(); !e.empty())
      return e;
    cudaEventRecord(c.stop, c.stream);
    if (std::string e =
            check(cudaEventSynchronize(c.stop), "cudaEventSynchronize");
        !e.empty())
      return e;
    float ms = 0;
    cudaEventElapsedTime(&ms, c.start, c.stop);
    double mine = ms * 1000.0, slowest;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, c.comm);
    samples.push_back(slowest);
  }
  us = medianOf(samples);
  return "";
}

} // namespace

bool gpuSweepsCompiled() { return true; }

std::string runGpuSweeps(MPI_Comm comm, int device, bool collectivesOnly,
                         long minBytes, long maxBytes, int gemmMax, int warmup,
                         int iters, GpuSweeps &out) {
  Context c;
  c.comm = comm;
  MPI_Comm_rank(comm, &c.rank);
  MPI_Comm_size(comm, &c.size);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return "no CUDA device on this machine";
  }
  if (std::string e = check(cudaSetDevice(device % devices), "cudaSetDevice");
      !e.empty())
    return e;
  ncclUniqueId id;
  if (c.rank == 0)
    ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm);
  std::string err;
  if (!(err = check(ncclCommInitRank(&c.nccl, c.size, id, c.rank),
                    "ncclCommInitRank"))
           .empty() ||
      !(err = check(cudaStreamCreate(&c.stream), "cudaStreamCreate")).empty() ||
      !(err = check(cudaEventCreate(&c.start), "cudaEventCreate")).empty() ||
      !(err = check(cudaEventCreate(&c.stop), "cudaEventCreate")).empty())
    return err;
  if (cublasCreate(&c.blas) != CUBLAS_STATUS_SUCCESS)
    return "cublasCreate failed";
  cublasSetStream(c.blas, c.stream);

  size_t maxFloats = size_t(maxBytes) / 4 * c.size + c.size;
  float *send = nullptr, *recv = nullptr;
  if (!(err = check(cudaMalloc(&send, maxFloats * 4), "cudaMalloc")).empty() ||
      !(err = check(cudaMalloc(&recv, maxFloats * 4), "cudaMalloc")).empty())
    return err;

  for (long bytes = minBytes; bytes <= maxBytes && err.empty(); bytes *= 2) {
    size_t count =
        std::max<size_t>(c.size, size_t(bytes) / 4 / c.size * c.size);
    size_t part = count / c.size;
    double us = 0;
    auto sweep = [&](Sweep &s, const std::function<std::string()> &op) {
      if (!err.empty())
        return;
      err = timeOp(c, warmup, iters, op, us);
      s.n.push_back(count * 4.0);
      s.t.push_back(us);
    };
    // An all-to-all counts what it sends to other ranks
    // (docs/profile-format.md); the others their whole buffer (an
    // all-gather's count is its gathered result).
    auto toOthers = [&] {
      out.allToAll.n.back() *= double(c.size - 1) / c.size;
    };
    sweep(out.allToAll, [&] {
      ncclGroupStart();
      for (int p = 0; p < c.size; ++p) {
        ncclSend(send + p * part, part, ncclFloat, p, c.nccl, c.stream);
        ncclRecv(recv + p * part, part, ncclFloat, p, c.nccl, c.stream);
      }
      return check(ncclGroupEnd(), "all-to-all");
    });
    if (err.empty())
      toOthers();
    sweep(out.allReduce, [&] {
      return check(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, c.nccl,
                                 c.stream),
                   "ncclAllReduce");
    });
    sweep(out.allGather, [&] {
      return check(ncclAllGather(send, recv, part, ncclFloat, c.nccl, c.stream),
                   "ncclAllGather");
    });
    sweep(out.reduceScatter, [&] {
      return check(ncclReduceScatter(send, recv, part, ncclFloat, ncclSum,
                                     c.nccl, c.stream),
                   "ncclReduceScatter");
    });
    if (!collectivesOnly)
      sweep(out.memory, [&] {
        return check(cudaMemcpyAsync(recv, send, count * 4,
                                     cudaMemcpyDeviceToDevice, c.stream),
                     "cudaMemcpyAsync");
      });
  }
  for (int s = 64; !collectivesOnly && s <= gemmMax && err.empty();
       s += std::max(64, s / 2)) {
    if (size_t(s) * s > maxFloats)
      break;
    const float one = 1.0f, zero = 0.0f;
    double us = 0;
    err = timeOp(
        c, warmup, iters,
        [&]() -> std::string {
          return cublasSgemm(c.blas, CUBLAS_OP_N, CUBLAS_OP_N, s, s, s, &one,
                             send, s, send, s, &zero, recv,
                             s) == CUBLAS_STATUS_SUCCESS
                     ? ""
                     : "cublasSgemm failed";
        },
        us);
    out.gemm.n.push_back(2.0 * s * s * s);
    out.gemm.t.push_back(us);
  }
  // Memory traffic counts the read and the write.
  for (double &n : out.memory.n)
    n *= 2;
  cudaFree(send);
  cudaFree(recv);
  cublasDestroy(c.blas);
  ncclCommDestroy(c.nccl);
  cudaEventDestroy(c.start);
  cudaEventDestroy(c.stop);
  cudaStreamDestroy(c.stream);
  return err;
}

} // namespace moe_profile
