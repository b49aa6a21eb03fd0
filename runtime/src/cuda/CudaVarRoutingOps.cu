//===- CudaVarRoutingOps.cu - dropless routing and experts on CUDA --------===//
//
// src/device/VarRoutingOps.h instantiated for CudaExecutor and NcclLink:
// the counts all-gathered with NCCL, the rows moved by grouped NCCL
// send/recv (moe_rt_all_to_all_v on a CUDA stream: ncclGroupStart, one
// ncclSend / ncclRecv per peer with rows, ncclGroupEnd), the expert GEMMs
// one cuBLAS call per expert over its filled rows. The host reads of the
// counts wait for the stream with the group's timeout, polling the NCCL
// communicators, so a dead peer is named rather than waited for.
//
//===----------------------------------------------------------------------===//

#include "CudaVarRoutingOps.h"

#include "../device/PlacementOps.h"
#include "../device/TokenChunkOps.h"
#include "../device/VarRoutingOps.h"
#include "CudaExecutor.h"

#include <cuda_runtime.h>

#include <string>

namespace moe_rt::cuda {

using device::CudaExecutor;

namespace {

/// A CUDA tensor view of `rows` x `m` floats (m = 2 for int64 counts moved
/// as raw words: NCCL's all-gather copies bytes and never reads them).
moe_rt_tensor view(const void *data, int64_t rows, int64_t m) {
  moe_rt_tensor t{};
  t.data = const_cast<void *>(data);
  t.rank = 2;
  t.shape[0] = rows;
  t.shape[1] = m;
  t.dtype = MOE_RT_F32;
  t.backend = MOE_RT_CUDA;
  return t;
}

/// Waits for the executor's stream (timeout <= 0: no limit; the wait
/// polls the NCCL communicators the stream waits on), then copies device ->
/// host. A plain copy into pageable memory would block inside CUDA, past
/// any peer's death.
moe_rt_status readToHost(moe_rt_stream s, cudaStream_t stream,
                         double timeoutSeconds, void *dst, const void *src,
                         size_t bytes, const char *what) {
  if (moe_rt_status st = waitStream(s, false, timeoutSeconds))
    return st;
  cudaError_t err =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess)
    err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess)
    return fail(MOE_RT_BACKEND_ERROR,
                std::string(what) + ": " + cudaGetErrorString(err));
  return MOE_RT_OK;
}

/// Host -> device on the stream; the pageable source is staged when the
/// call returns, so the caller may free it.
moe_rt_status writeToDevice(cudaStream_t stream, void *dst, const void *src,
                            size_t bytes, const char *what) {
  if (cudaError_t err =
          cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream);
      err != cudaSuccess)
    return fail(MOE_RT_BACKEND_ERROR,
                std::string(what) + ": " + cudaGetErrorString(err));
  return MOE_RT_OK;
}

/// The link of VarRoutingOps.h's routed ops: the group's NCCL
/// communicators, on the executor's stream.
class NcclLink {
public:
  NcclLink(moe_rt_stream s, moe_rt_comm comm, int64_t ranks,
           cudaStream_t stream)
      : s(s), comm(comm), ranks(ranks), stream(stream) {}

  moe_rt_status allGather(const int64_t *mine, int64_t *all, int64_t n) {
    moe_rt_tensor send = view(mine, n, 2), recv = view(all, n * ranks, 2);
    return moe_rt_all_gather(s, comm, &send, &recv);
  }

  moe_rt_status allGatherF32(const float *mine, float *all, int64_t n) {
    moe_rt_tensor send = view(mine, n, 1), recv = view(all, n * ranks, 1);
    return moe_rt_all_gather(s, comm, &send, &recv);
  }

  moe_rt_status reduceScatterF32(const float *all, float *mine, int64_t n) {
    moe_rt_tensor send = view(all, n * ranks, 1), recv = view(mine, n, 1);
    return moe_rt_reduce_scatter(s, comm, &send, &recv);
  }

  moe_rt_status toHost(void *dst, const void *src, size_t bytes) {
    return readToHost(s, stream, moe_rt_comm_timeout(comm), dst, src, bytes,
                      "reading routing counts");
  }

  moe_rt_status toDevice(void *dst, const void *src, size_t bytes) {
    return writeToDevice(stream, dst, src, bytes, "writing routing rows");
  }

  moe_rt_status allToAllV(const float *send, int64_t sendCapacity,
                          const int64_t *sendRows, float *recv,
                          int64_t recvCapacity, const int64_t *recvRows,
                          int64_t m) {
    moe_rt_tensor sendView = view(send, sendCapacity, m),
                  recvView = view(recv, recvCapacity, m);
    return moe_rt_all_to_all_v(s, comm, &sendView, sendRows, &recvView,
                               recvRows);
  }

private:
  moe_rt_stream s;
  moe_rt_comm comm;
  int64_t ranks;
  cudaStream_t stream;
};

/// The link of an op with no group (the experts, the rows_* calls): host
/// reads of its tables and writes of what it plans from them. No timeout
/// of its own; the wait still polls the communicators of the dispatch that
/// made the tables (a peer's failure ends it).
class StreamLink {
public:
  StreamLink(moe_rt_stream s, cudaStream_t stream, const char *what)
      : s(s), stream(stream), what(what) {}
  moe_rt_status toHost(void *dst, const void *src, size_t bytes) {
    return readToHost(s, stream, 0, dst, src, bytes, what);
  }
  moe_rt_status toDevice(void *dst, const void *src, size_t bytes) {
    return writeToDevice(stream, dst, src, bytes, what);
  }

private:
  moe_rt_stream s;
  cudaStream_t stream;
  const char *what;
};

} // namespace

moe_rt_status dispatchV(moe_rt_stream s, moe_rt_comm comm,
                        const VarRouteShape &r, const float *x,
                        const int64_t *indices, float *out, int64_t *rows) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  NcclLink link(s, comm, r.G, ex.stream());
  return device::dispatchV(ex, link, r, x, indices, out, rows);
}

moe_rt_status dispatchVGrad(moe_rt_stream s, moe_rt_comm comm,
                            const VarRouteShape &r, const int64_t *indices,
                            const float *dout, float *dx) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  NcclLink link(s, comm, r.G, ex.stream());
  return device::dispatchVGrad(ex, link, r, indices, dout, dx);
}

moe_rt_status combineV(moe_rt_stream s, moe_rt_comm comm,
                       const VarRouteShape &r, const int64_t *rows,
                       const float *expertOut, const int64_t *indices,
                       const float *weights, float *out) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  NcclLink link(s, comm, r.G, ex.stream());
  return device::combineV(ex, link, r, rows, expertOut, indices, weights, out);
}

moe_rt_status combineVGrad(moe_rt_stream s, moe_rt_comm comm,
                           const VarRouteShape &r, const int64_t *rows,
                           const float *expertOut, const int64_t *indices,
                           const float *weights, const float *dout,
                           float *dexpertOut, float *dweights) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  NcclLink link(s, comm, r.G, ex.stream());
  return device::combineVGrad(ex, link, r, rows, expertOut, indices, weights,
                              dout, dexpertOut, dweights);
}

moe_rt_status expertV(moe_rt_stream s, moe_rt_activation act,
                      const ExpertShape &f, int64_t ranks, const int64_t *rows,
                      const float *x, const float *up, const float *gate,
                      const float *down, float *out) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  StreamLink link(s, ex.stream(), "reading expert rows");
  return device::expertV(ex, link, act, f, ranks, rows, x, up, gate, down, out);
}

moe_rt_status expertVGrad(moe_rt_stream s, moe_rt_activation act,
                          const ExpertShape &f, int64_t ranks,
                          const int64_t *rows, const float *x, const float *up,
                          const float *gate, const float *down,
                          const float *dout, float *dx, float *dup,
                          float *dgate, float *ddown) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  StreamLink link(s, ex.stream(), "reading expert rows");
  return device::expertVGrad(ex, link, act, f, ranks, rows, x, up, gate, down,
                             dout, dx, dup, dgate, ddown);
}

moe_rt_status rowsSum(moe_rt_stream s, int64_t n, const int64_t *rows,
                      int64_t *total, bool accumulate) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  return device::rowsSum(ex, n, rows, total, accumulate);
}

moe_rt_status rowsWindow(moe_rt_stream s, const RowsWindowShape &w,
                         const int64_t *total, const int64_t *chunkRows,
                         const float *chunk, float *out) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  StreamLink link(s, ex.stream(), "reading token-chunk rows");
  return device::rowsWindow(ex, link, w, total, chunkRows, chunk, out);
}

moe_rt_status rowsPart(moe_rt_stream s, int64_t n, int64_t part, int64_t parts,
                       int64_t *rows) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  return device::rowsPart(ex, n, part, parts, rows);
}

moe_rt_status combineVPlaced(moe_rt_stream s, moe_rt_comm comm,
                             const VarRouteShape &r, int64_t B,
                             const float *expertOut, const int64_t *indices,
                             const float *weights, const float *residual,
                             const int64_t *place, float *out) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  NcclLink link(s, comm, r.G, ex.stream());
  return device::combineVPlaced(ex, link, r, B, expertOut, indices, weights,
                                residual, place, out);
}

moe_rt_status combineVPlacedGrad(moe_rt_stream s, moe_rt_comm comm,
                                 const VarRouteShape &r, int64_t B,
                                 const float *expertOut,
                                 const int64_t *indices, const float *weights,
                                 const int64_t *place, const float *dout,
                                 float *dexpertOut, float *dweights,
                                 float *dresidual) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  NcclLink link(s, comm, r.G, ex.stream());
  return device::combineVPlacedGrad(ex, link, r, B, expertOut, indices,
                                    weights, place, dout, dexpertOut, dweights,
                                    dresidual);
}

moe_rt_status moveSamples(moe_rt_stream s, moe_rt_comm comm, int64_t G,
                          int64_t rank, int64_t B, int64_t row,
                          const int64_t *place, const int64_t *x,
                          int64_t *out) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  NcclLink link(s, comm, G, ex.stream());
  return device::moveSamples(ex, link, G, rank, B, row, place, x, out);
}

} // namespace moe_rt::cuda
