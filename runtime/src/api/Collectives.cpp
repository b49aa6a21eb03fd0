//===- Collectives.cpp - the public collectives: checks, then transport ---===//
//
// moe_rt_all_reduce, moe_rt_all_to_all(_v), moe_rt_all_gather,
// moe_rt_reduce_scatter, moe_rt_send and moe_rt_recv: each checks its
// arguments, then runs over MPI on a CPU stream (src/mpi: MpiCollectives.h,
// PointToPoint.h) or over NCCL on a CUDA stream (src/mpi/NcclGroups.h,
// src/cuda/NcclCollectives.cpp). Built with MPI; without it,
// src/mpi/NoMpi.cpp answers these calls.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/collectives.h"

#include "../Backend.h"
#include "../CollectivePlan.h"
#include "../Error.h"
#include "../mpi/MpiCollectives.h"
#include "../mpi/PointToPoint.h"
#ifdef MOE_RT_HAVE_CUDA
#include "../mpi/NcclGroups.h"
#endif

#include <algorithm>
#include <limits>
#include <memory>
#include <string>

using namespace moe_rt;
using namespace moe_rt::coll;

static moe_rt_status checkTensor(const moe_rt_tensor *t, const char *what) {
  if (!t || !t->data)
    return fail(MOE_RT_INVALID_ARGUMENT, std::string(what) + ": NULL tensor");
  if (t->backend != MOE_RT_CPU || t->dtype != MOE_RT_F32)
    return fail(MOE_RT_INVALID_ARGUMENT,
                std::string(what) + ": needs an F32 tensor in CPU memory");
  if (moe_rt_tensor_numel(t) < 0)
    return fail(MOE_RT_INVALID_ARGUMENT, std::string(what) + ": bad tensor");
  return MOE_RT_OK;
}

#ifdef MOE_RT_HAVE_CUDA
static moe_rt_status checkCudaTensor(const moe_rt_tensor *t, const char *what) {
  if (!t || !t->data)
    return fail(MOE_RT_INVALID_ARGUMENT, std::string(what) + ": NULL tensor");
  if (t->backend != MOE_RT_CUDA || t->dtype != MOE_RT_F32)
    return fail(MOE_RT_INVALID_ARGUMENT,
                std::string(what) +
                    ": on a CUDA stream it needs an F32 tensor in CUDA memory");
  if (moe_rt_tensor_numel(t) < 0)
    return fail(MOE_RT_INVALID_ARGUMENT, std::string(what) + ": bad tensor");
  return MOE_RT_OK;
}
#endif

/// Whether a collective runs with NCCL: a CUDA stream (the tensors are then
/// checked to be CUDA). Without the CUDA backend no CUDA stream exists.
static bool onCuda(moe_rt_stream stream) {
  return stream->impl->backend() == MOE_RT_CUDA;
}

#ifndef MOE_RT_HAVE_CUDA
static moe_rt_status noCuda(const char *what) {
  return fail(MOE_RT_UNAVAILABLE,
              std::string(what) + ": the runtime was built without CUDA");
}
#endif

extern "C" moe_rt_status
moe_rt_all_reduce(moe_rt_stream stream, moe_rt_comm comm, moe_rt_tensor *tensor,
                  int64_t offset_bytes, int64_t size_bytes) {
  if (!stream || !comm)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_all_reduce: NULL argument");
  bool cuda = onCuda(stream);
#ifdef MOE_RT_HAVE_CUDA
  if (cuda) {
    if (moe_rt_status s = checkCudaTensor(tensor, "moe_rt_all_reduce"))
      return s;
  } else
#endif
      if (moe_rt_status s = checkTensor(tensor, "moe_rt_all_reduce"))
    return s;
  ElementRange range;
  std::string why = elementRange(offset_bytes, size_bytes,
                                 moe_rt_tensor_numel(tensor) * 4, 4, range);
  if (!why.empty())
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_all_reduce: " + why);
  float *data = static_cast<float *>(tensor->data) + range.offset;
  if (cuda) {
#ifdef MOE_RT_HAVE_CUDA
    int64_t bytes = range.count * 4;
    return mpi::runNccl(stream, comm, AllReduce, bytes, [&](nccl::Comm *nc) {
      return nccl::allReduce(nc, stream, data, range.count);
    });
#else
    return noCuda("moe_rt_all_reduce");
#endif
  }
  return mpi::allReduce(stream, comm, data, range.count, "moe_rt_all_reduce");
}

/// Checks a send/recv pair for the stream's backend.
static moe_rt_status checkPair(bool cuda, const moe_rt_tensor *send,
                               const moe_rt_tensor *recv, const char *what) {
#ifdef MOE_RT_HAVE_CUDA
  if (cuda) {
    if (moe_rt_status s = checkCudaTensor(send, what))
      return s;
    return checkCudaTensor(recv, what);
  }
#else
  if (cuda)
    return noCuda(what);
#endif
  if (moe_rt_status s = checkTensor(send, what))
    return s;
  return checkTensor(recv, what);
}

/// An all-to-all(-v) of `plan`: NCCL grouped send/recv on a CUDA stream,
/// MPI_Ialltoallv otherwise. `bytes` is the shape-check signature.
static moe_rt_status allToAllOf(moe_rt_stream stream, moe_rt_comm comm,
                                bool cuda, int64_t kind, int64_t bytes,
                                const moe_rt_tensor *send, moe_rt_tensor *recv,
                                PeerPlan plan, const char *what) {
  const float *in = static_cast<const float *>(send->data);
  float *outData = static_cast<float *>(recv->data);
  if (cuda) {
#ifdef MOE_RT_HAVE_CUDA
    return mpi::runNccl(stream, comm, kind, bytes, [&](nccl::Comm *nc) {
      return nccl::allToAll(nc, stream, in, outData, plan);
    });
#else
    return noCuda(what);
#endif
  }
  return mpi::allToAll(stream, comm, kind, bytes, in, outData, plan, what);
}

extern "C" moe_rt_status moe_rt_all_to_all(moe_rt_stream stream,
                                           moe_rt_comm comm,
                                           const moe_rt_tensor *send,
                                           moe_rt_tensor *recv) {
  if (!stream || !comm)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_all_to_all: NULL argument");
  bool cuda = onCuda(stream);
  if (moe_rt_status s = checkPair(cuda, send, recv, "moe_rt_all_to_all"))
    return s;
  int64_t n = moe_rt_tensor_numel(send);
  PeerPlan plan;
  std::string why =
      send->rank < 1
          ? "send and recv must have the same size and a dimension 0 "
            "divisible by the group size " +
                std::to_string(moe_rt_comm_size(comm))
          : planAllToAll(moe_rt_comm_size(comm), n, send->shape[0],
                         moe_rt_tensor_numel(recv), plan);
  if (!why.empty())
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_all_to_all: " + why);
  return allToAllOf(stream, comm, cuda, AllToAll, n * 4, send, recv,
                    std::move(plan), "moe_rt_all_to_all");
}

extern "C" moe_rt_status
moe_rt_all_to_all_v(moe_rt_stream stream, moe_rt_comm comm,
                    const moe_rt_tensor *send, const int64_t *send_rows,
                    moe_rt_tensor *recv, const int64_t *recv_rows) {
  if (!stream || !comm || !send_rows || !recv_rows)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_all_to_all_v: NULL argument");
  bool cuda = onCuda(stream);
  if (moe_rt_status s = checkPair(cuda, send, recv, "moe_rt_all_to_all_v"))
    return s;
  if (send->rank < 1 || recv->rank < 1)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_all_to_all_v: tensors need a row dimension");
  int64_t rowSend =
      moe_rt_tensor_numel(send) / std::max<int64_t>(1, send->shape[0]);
  int64_t rowRecv =
      moe_rt_tensor_numel(recv) / std::max<int64_t>(1, recv->shape[0]);
  PeerPlan plan;
  std::string why =
      planAllToAllV(moe_rt_comm_size(comm), send_rows, recv_rows, rowSend, send->shape[0],
                    rowRecv, recv->shape[0], plan);
  if (!why.empty())
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_all_to_all_v: " + why);
  // The signature is the kind only (sizes differ by rank by design); the
  // counts are checked by MPI, and must agree pairwise for NCCL.
  return allToAllOf(stream, comm, cuda, AllToAllV, -1, send, recv,
                    std::move(plan), "moe_rt_all_to_all_v");
}

extern "C" moe_rt_status moe_rt_all_gather(moe_rt_stream stream,
                                           moe_rt_comm comm,
                                           const moe_rt_tensor *send,
                                           moe_rt_tensor *recv) {
  if (!stream || !comm)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_all_gather: NULL argument");
  bool cuda = onCuda(stream);
  if (moe_rt_status s = checkPair(cuda, send, recv, "moe_rt_all_gather"))
    return s;
  int64_t n = moe_rt_tensor_numel(send);
  if (moe_rt_tensor_numel(recv) != n * moe_rt_comm_size(comm))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_all_gather: recv must hold group size x send");
  const float *in = static_cast<const float *>(send->data);
  float *outData = static_cast<float *>(recv->data);
  if (cuda) {
#ifdef MOE_RT_HAVE_CUDA
    return mpi::runNccl(stream, comm, AllGather, n * 4, [&](nccl::Comm *nc) {
      return nccl::allGather(nc, stream, in, outData, n);
    });
#endif
  }
  return mpi::allGather(stream, comm, in, outData, n);
}

extern "C" moe_rt_status moe_rt_reduce_scatter(moe_rt_stream stream,
                                               moe_rt_comm comm,
                                               const moe_rt_tensor *send,
                                               moe_rt_tensor *recv) {
  if (!stream || !comm)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_reduce_scatter: NULL argument");
  bool cuda = onCuda(stream);
  if (moe_rt_status s = checkPair(cuda, send, recv, "moe_rt_reduce_scatter"))
    return s;
  int64_t n = moe_rt_tensor_numel(recv);
  if (moe_rt_tensor_numel(send) != n * moe_rt_comm_size(comm))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_reduce_scatter: send must hold group size x recv");
  const float *in = static_cast<const float *>(send->data);
  float *outData = static_cast<float *>(recv->data);
  if (cuda) {
#ifdef MOE_RT_HAVE_CUDA
    return mpi::runNccl(stream, comm, ReduceScatter, n * 4, [&](nccl::Comm *nc) {
      return nccl::reduceScatter(nc, stream, in, outData, n);
    });
#endif
  }
  return mpi::reduceScatter(stream, comm, in, outData, n);
}

/// Checks a send/recv's arguments; `bytes` is what it moves.
static moe_rt_status checkPointToPoint(moe_rt_stream stream, moe_rt_comm comm,
                                       const moe_rt_tensor *t, int peer,
                                       const char *what, int64_t &bytes) {
  if (!stream || !comm || !t || !t->data)
    return fail(MOE_RT_INVALID_ARGUMENT,
                std::string(what) + ": NULL stream, comm or tensor");
  bool cuda = onCuda(stream);
#ifndef MOE_RT_HAVE_CUDA
  if (cuda)
    return noCuda(what);
#endif
  if (t->backend != (cuda ? MOE_RT_CUDA : MOE_RT_CPU))
    return fail(MOE_RT_INVALID_ARGUMENT,
                std::string(what) +
                    (cuda ? ": on a CUDA stream it needs a tensor in CUDA "
                            "memory"
                          : ": on a CPU stream it needs a tensor in CPU "
                            "memory"));
  int64_t numel = moe_rt_tensor_numel(t);
  size_t elem = moe_rt_dtype_size(t->dtype);
  if (numel < 0 || elem == 0)
    return fail(MOE_RT_INVALID_ARGUMENT,
                std::string(what) + ": bad tensor (shape or dtype)");
  std::string why = checkPeer(moe_rt_comm_size(comm), moe_rt_comm_rank(comm), peer);
  if (!why.empty())
    return fail(MOE_RT_INVALID_ARGUMENT, std::string(what) + ": " + why);
  bytes = numel * int64_t(elem);
  if (!cuda && bytes > std::numeric_limits<int>::max())
    return fail(MOE_RT_INVALID_ARGUMENT,
                std::string(what) + ": more bytes than MPI's int counts");
  return MOE_RT_OK;
}

/// Queues one side of a transfer: on a CPU stream as non-blocking steps
/// (a pool's high-priority queue), on a CUDA stream with NCCL.
static moe_rt_status pointToPoint(moe_rt_stream stream, moe_rt_comm comm,
                                  const moe_rt_tensor *tensor, int peer,
                                  bool sending) {
  const char *what = sending ? "moe_rt_send" : "moe_rt_recv";
  int64_t bytes = 0;
  if (moe_rt_status s =
          checkPointToPoint(stream, comm, tensor, peer, what, bytes))
    return s;
  auto t = std::make_shared<mpi::P2PTransfer>();
  t->sending = sending;
  t->peer = peer;
  t->data = tensor->data;
  t->bytes = bytes;
  t->dtype = tensor->dtype;
  if (onCuda(stream)) {
#ifdef MOE_RT_HAVE_CUDA
    return mpi::runNcclP2P(stream, comm, std::move(t));
#endif
  }
  return mpi::queueTransfer(stream, comm, std::move(t));
}

extern "C" moe_rt_status moe_rt_send(moe_rt_stream stream, moe_rt_comm comm,
                                     const moe_rt_tensor *tensor, int peer) {
  return pointToPoint(stream, comm, tensor, peer, true);
}

extern "C" moe_rt_status moe_rt_recv(moe_rt_stream stream, moe_rt_comm comm,
                                     moe_rt_tensor *tensor, int peer) {
  return pointToPoint(stream, comm, tensor, peer, false);
}

