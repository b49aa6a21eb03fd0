//===- MpiCollectives.cpp - bounded MPI collectives on streams
//--------------===//
//
// Non-blocking MPI collectives polled to a deadline, so that no rank waits
// forever on a dead or stuck peer (FlowMoE App. K.3: a barrier with timeout
// detects the failed rank). On a timeout the communicator is marked failed
// and a liveness probe — every rank sends a token to every other on a
// dedicated communicator — names the ranks that did not answer.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/collectives.h"

#include "../Backend.h"
#include "../Error.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace moe_rt;

struct moe_rt_comm_impl {
  MPI_Comm a2a = MPI_COMM_NULL, ar = MPI_COMM_NULL, probe = MPI_COMM_NULL;
  int rank = 0, size = 1;
  double timeoutSeconds = 0;
  bool checkShapes = false;
  std::mutex mutex;
  std::string failed; // set once a collective timed out

  ~moe_rt_comm_impl() {
    // A failed communicator has requests in flight that MPI cannot cancel;
    // leave it to MPI_Abort/MPI_Finalize rather than free it under them.
    if (!failed.empty())
      return;
    for (MPI_Comm *c : {&a2a, &ar, &probe})
      if (*c != MPI_COMM_NULL)
        MPI_Comm_free(c);
  }
};

namespace {

using Clock = std::chrono::steady_clock;

enum Kind : int64_t {
  AllReduce = 1,
  AllToAll,
  AllToAllV,
  AllGather,
  ReduceScatter
};

const char *kindName(int64_t k) {
  switch (k) {
  case AllReduce:
    return "all_reduce";
  case AllToAll:
    return "all_to_all";
  case AllToAllV:
    return "all_to_all_v";
  case AllGather:
    return "all_gather";
  case ReduceScatter:
    return "reduce_scatter";
  }
  return "collective";
}

std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, length);
}

/// Ranks of `comm` that did not answer a token within `window` seconds.
std::string unresponsiveRanks(moe_rt_comm_impl &c, double window) {
  std::vector<int> tokens(c.size, 0), mine(1, c.rank);
  std::vector<MPI_Request> recvs(c.size, MPI_REQUEST_NULL),
      sends(c.size, MPI_REQUEST_NULL);
  for (int p = 0; p < c.size; ++p) {
    if (p == c.rank)
      continue;
    MPI_Irecv(&tokens[p], 1, MPI_INT, p, 77, c.probe, &recvs[p]);
    MPI_Isend(mine.data(), 1, MPI_INT, p, 77, c.probe, &sends[p]);
  }
  auto deadline = Clock::now() + std::chrono::duration<double>(window);
  std::vector<bool> heard(c.size, false);
  heard[c.rank] = true;
  while (Clock::now() < deadline) {
    bool all = true;
    for (int p = 0; p < c.size; ++p) {
      if (heard[p])
        continue;
      int done = 0;
      MPI_Test(&recvs[p], &done, MPI_STATUS_IGNORE);
      heard[p] = done;
      all &= heard[p];
    }
    if (all)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string missing;
  for (int p = 0; p < c.size; ++p)
    if (!heard[p])
      missing += (missing.empty() ? "" : ", ") + std::to_string(p);
  return missing;
}

/// The error for a collective that outlived the communicator's timeout:
/// names the ranks that do not answer a liveness probe, and marks the
/// communicator failed (its requests cannot be cancelled).
moe_rt_status timedOut(moe_rt_comm_impl &c, const char *what,
                       std::string &message) {
  std::string missing = unresponsiveRanks(c, std::min(2.0, c.timeoutSeconds));
  message = std::string(what) + " on rank " + std::to_string(c.rank) +
            " timed out after " + std::to_string(c.timeoutSeconds) + " s; " +
            (missing.empty()
                 ? std::string("every rank answered a liveness probe, so a "
                               "rank is stuck in a different collective")
                 : "rank(s) " + missing + " did not respond");
  std::lock_guard<std::mutex> lock(c.mutex);
  c.failed = message;
  return MOE_RT_TIMEOUT;
}

/// A collective as non-blocking steps: [signature exchange,] post, test.
/// With shape checks, ranks exchange kind and size first (FlowMoE App. K: a
/// mismatch must not corrupt memory or hang). Non-blocking so that the
/// communication pool can keep an all-reduce and an all-to-all in flight
/// together: a rank blocked in one class while its peer blocks in the other
/// would deadlock.
class CollectiveSteps {
public:
  CollectiveSteps(moe_rt_comm c, MPI_Comm comm, int64_t kind, int64_t bytes,
                  std::function<int(MPI_Request *)> post)
      : c(c), comm(comm), kind(kind), bytes(bytes), post(std::move(post)) {}

  /// One step; true when finished, with `status` and `message` set.
  bool operator()(std::string &message, moe_rt_status &status) {
    if (state == Start) {
      start = Clock::now();
      {
        std::lock_guard<std::mutex> lock(c->mutex);
        if (!c->failed.empty()) {
          message = "communicator failed earlier: " + c->failed;
          status = MOE_RT_BACKEND_ERROR;
          return true;
        }
      }
      if (c->checkShapes) {
        mine[0] = kind;
        mine[1] = bytes;
        all.resize(2 * c->size);
        MPI_Iallgather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, comm,
                       &request);
        state = Checking;
        return false;
      }
      return !postCollective(message, status);
    }
    int done = 0;
    if (int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        rc != MPI_SUCCESS) {
      message = std::string(kindName(kind)) + " failed: " + mpiError(rc);
      status = MOE_RT_BACKEND_ERROR;
      return true;
    }
    if (!done) {
      std::chrono::duration<double> waited = Clock::now() - start;
      if (c->timeoutSeconds > 0 && waited.count() > c->timeoutSeconds) {
        status = timedOut(
            *c, state == Checking ? "shape check" : kindName(kind), message);
        return true;
      }
      return false;
    }
    if (state == Checking) {
      for (int p = 0; p < c->size; ++p)
        if (all[2 * p] != kind || all[2 * p + 1] != bytes) {
          message = "mismatch between ranks: rank " + std::to_string(p) +
                    " issued " + kindName(all[2 * p]) + " of " +
                    std::to_string(all[2 * p + 1]) + " B while rank " +
                    std::to_string(c->rank) + " issued " + kindName(kind) +
                    " of " + std::to_string(bytes) + " B";
          status = MOE_RT_INVALID_ARGUMENT;
          return true;
        }
      return !postCollective(message, status);
    }
    status = MOE_RT_OK;
    return true;
  }

private:
  /// Posts the collective; false (with status set) if MPI refused.
  bool postCollective(std::string &message, moe_rt_status &status) {
    if (int rc = post(&request); rc != MPI_SUCCESS) {
      message = std::string(kindName(kind)) + ": " + mpiError(rc);
      status = MOE_RT_BACKEND_ERROR;
      return false;
    }
    state = Running;
    return true;
  }

  enum State { Start, Checking, Running };
  moe_rt_comm c;
  MPI_Comm comm;
  int64_t kind, bytes;
  std::function<int(MPI_Request *)> post;
  State state = Start;
  MPI_Request request = MPI_REQUEST_NULL;
  int64_t mine[2] = {0, 0};
  std::vector<int64_t> all;
  Clock::time_point start;
};

moe_rt_status checkTensor(const moe_rt_tensor *t, const char *what) {
  if (!t || !t->data)
    return fail(MOE_RT_INVALID_ARGUMENT, std::string(what) + ": NULL tensor");
  if (t->backend != MOE_RT_CPU || t->dtype != MOE_RT_F32)
    return fail(MOE_RT_INVALID_ARGUMENT,
                std::string(what) + ": needs an F32 tensor in CPU memory");
  if (moe_rt_tensor_numel(t) < 0)
    return fail(MOE_RT_INVALID_ARGUMENT, std::string(what) + ": bad tensor");
  return MOE_RT_OK;
}

/// Queues the collective that `post` starts, as non-blocking steps.
moe_rt_status enqueueCollective(moe_rt_stream stream, moe_rt_comm c,
                                MPI_Comm comm, int64_t kind, int64_t bytes,
                                bool lowPriority,
                                std::function<int(MPI_Request *)> post) {
  auto steps =
      std::make_shared<CollectiveSteps>(c, comm, kind, bytes, std::move(post));
  return stream->impl->enqueueAsync(
      [steps](std::string &message, moe_rt_status &status) {
        return (*steps)(message, status);
      },
      lowPriority);
}

moe_rt_status commFromMpi(MPI_Comm base, double timeout, bool checks,
                          moe_rt_comm *out) {
  auto c = std::make_unique<moe_rt_comm_impl>();
  for (MPI_Comm *dup : {&c->a2a, &c->ar, &c->probe})
    if (int rc = MPI_Comm_dup(base, dup); rc != MPI_SUCCESS)
      return fail(MOE_RT_BACKEND_ERROR, "MPI_Comm_dup: " + mpiError(rc));
  for (MPI_Comm comm : {c->a2a, c->ar, c->probe})
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->a2a, &c->rank);
  MPI_Comm_size(c->a2a, &c->size);
  c->timeoutSeconds = timeout;
  c->checkShapes = checks;
  *out = c.release();
  return ok();
}

} // namespace

extern "C" moe_rt_status moe_rt_mpi_init(int *argc, char ***argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    return ok();
  int provided = 0;
  if (int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
      rc != MPI_SUCCESS)
    return fail(MOE_RT_BACKEND_ERROR, "MPI_Init_thread: " + mpiError(rc));
  if (provided < MPI_THREAD_SERIALIZED)
    return fail(MOE_RT_UNAVAILABLE,
                "the MPI library does not support calls from stream threads "
                "(needs at least MPI_THREAD_SERIALIZED)");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return ok();
}

extern "C" moe_rt_status moe_rt_mpi_finalize(void) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
  return ok();
}

extern "C" void moe_rt_mpi_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

extern "C" moe_rt_status
moe_rt_comm_create_world(double timeout_s, int check_shapes, moe_rt_comm *out) {
  if (!out)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_comm_create_world: NULL out");
  *out = nullptr;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return fail(MOE_RT_UNAVAILABLE,
                "moe_rt_comm_create_world: call moe_rt_mpi_init first");
  return commFromMpi(MPI_COMM_WORLD, timeout_s, check_shapes != 0, out);
}

extern "C" moe_rt_status moe_rt_comm_split(moe_rt_comm parent, int color,
                                           moe_rt_comm *out) {
  if (!parent || !out || color < 0)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_comm_split: NULL argument or negative color");
  MPI_Comm split;
  if (int rc = MPI_Comm_split(parent->a2a, color, parent->rank, &split);
      rc != MPI_SUCCESS)
    return fail(MOE_RT_BACKEND_ERROR, "MPI_Comm_split: " + mpiError(rc));
  moe_rt_status s =
      commFromMpi(split, parent->timeoutSeconds, parent->checkShapes, out);
  MPI_Comm_free(&split);
  return s;
}

extern "C" moe_rt_status moe_rt_comm_destroy(moe_rt_comm comm) {
  if (!comm)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_comm_destroy: NULL");
  delete comm;
  return ok();
}

extern "C" int moe_rt_comm_rank(moe_rt_comm comm) {
  return comm ? comm->rank : -1;
}
extern "C" int moe_rt_comm_size(moe_rt_comm comm) {
  return comm ? comm->size : 0;
}

extern "C" moe_rt_status
moe_rt_all_reduce(moe_rt_stream stream, moe_rt_comm comm, moe_rt_tensor *tensor,
                  int64_t offset_bytes, int64_t size_bytes) {
  if (!stream || !comm)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_all_reduce: NULL argument");
  if (moe_rt_status s = checkTensor(tensor, "moe_rt_all_reduce"))
    return s;
  int64_t total = moe_rt_tensor_numel(tensor) * 4;
  if (size_bytes < 0) {
    offset_bytes = 0;
    size_bytes = total;
  }
  if (offset_bytes < 0 || offset_bytes % 4 || size_bytes % 4 ||
      offset_bytes + size_bytes > total)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_all_reduce: range [" + std::to_string(offset_bytes) +
                    ", " + std::to_string(offset_bytes + size_bytes) +
                    ") is not whole floats inside the tensor's " +
                    std::to_string(total) + " bytes");
  float *data = static_cast<float *>(tensor->data) + offset_bytes / 4;
  int count = static_cast<int>(size_bytes / 4);
  return enqueueCollective(
      stream, comm, comm->ar, AllReduce, size_bytes, /*lowPriority=*/true,
      [data, count, comm](MPI_Request *r) {
        return MPI_Iallreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM,
                              comm->ar, r);
      });
}

extern "C" moe_rt_status moe_rt_all_to_all(moe_rt_stream stream,
                                           moe_rt_comm comm,
                                           const moe_rt_tensor *send,
                                           moe_rt_tensor *recv) {
  if (!stream || !comm)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_all_to_all: NULL argument");
  if (moe_rt_status s = checkTensor(send, "moe_rt_all_to_all"))
    return s;
  if (moe_rt_status s = checkTensor(recv, "moe_rt_all_to_all"))
    return s;
  int64_t n = moe_rt_tensor_numel(send);
  if (n != moe_rt_tensor_numel(recv) || send->rank < 1 ||
      send->shape[0] % comm->size)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_all_to_all: send and recv must have the same size "
                "and a dimension 0 divisible by the group size " +
                    std::to_string(comm->size));
  int part = static_cast<int>(n / comm->size);
  const float *in = static_cast<const float *>(send->data);
  float *outData = static_cast<float *>(recv->data);
  return enqueueCollective(
      stream, comm, comm->a2a, AllToAll, n * 4, false, [=](MPI_Request *r) {
        return MPI_Ialltoall(in, part, MPI_FLOAT, outData, part, MPI_FLOAT,
                             comm->a2a, r);
      });
}

extern "C" moe_rt_status
moe_rt_all_to_all_v(moe_rt_stream stream, moe_rt_comm comm,
                    const moe_rt_tensor *send, const int64_t *send_rows,
                    moe_rt_tensor *recv, const int64_t *recv_rows) {
  if (!stream || !comm || !send_rows || !recv_rows)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_all_to_all_v: NULL argument");
  if (moe_rt_status s = checkTensor(send, "moe_rt_all_to_all_v"))
    return s;
  if (moe_rt_status s = checkTensor(recv, "moe_rt_all_to_all_v"))
    return s;
  if (send->rank < 1 || recv->rank < 1)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_all_to_all_v: tensors need a row dimension");
  int64_t rowSend =
      moe_rt_tensor_numel(send) / std::max<int64_t>(1, send->shape[0]);
  int64_t rowRecv =
      moe_rt_tensor_numel(recv) / std::max<int64_t>(1, recv->shape[0]);
  std::vector<int> sc(comm->size), sd(comm->size), rc(comm->size),
      rd(comm->size);
  int64_t sendTotal = 0, recvTotal = 0;
  for (int p = 0; p < comm->size; ++p) {
    if (send_rows[p] < 0 || recv_rows[p] < 0)
      return fail(MOE_RT_INVALID_ARGUMENT,
                  "moe_rt_all_to_all_v: negative row count");
    sd[p] = static_cast<int>(sendTotal * rowSend);
    sc[p] = static_cast<int>(send_rows[p] * rowSend);
    rd[p] = static_cast<int>(recvTotal * rowRecv);
    rc[p] = static_cast<int>(recv_rows[p] * rowRecv);
    sendTotal += send_rows[p];
    recvTotal += recv_rows[p];
  }
  if (rowSend != rowRecv || sendTotal > send->shape[0] ||
      recvTotal > recv->shape[0])
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_all_to_all_v: row counts exceed the tensors or row "
                "sizes differ");
  const float *in = static_cast<const float *>(send->data);
  float *outData = static_cast<float *>(recv->data);
  // The signature is what this rank sends; counts are checked by MPI.
  return enqueueCollective(
      stream, comm, comm->a2a, AllToAllV, -1, false, [=](MPI_Request *r) {
        return MPI_Ialltoallv(in, sc.data(), sd.data(), MPI_FLOAT, outData,
                              rc.data(), rd.data(), MPI_FLOAT, comm->a2a, r);
      });
}

extern "C" moe_rt_status moe_rt_all_gather(moe_rt_stream stream,
                                           moe_rt_comm comm,
                                           const moe_rt_tensor *send,
                                           moe_rt_tensor *recv) {
  if (!stream || !comm)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_all_gather: NULL argument");
  if (moe_rt_status s = checkTensor(send, "moe_rt_all_gather"))
    return s;
  if (moe_rt_status s = checkTensor(recv, "moe_rt_all_gather"))
    return s;
  int64_t n = moe_rt_tensor_numel(send);
  if (moe_rt_tensor_numel(recv) != n * comm->size)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_all_gather: recv must hold group size x send");
  const float *in = static_cast<const float *>(send->data);
  float *outData = static_cast<float *>(recv->data);
  return enqueueCollective(
      stream, comm, comm->a2a, AllGather, n * 4, false, [=](MPI_Request *r) {
        return MPI_Iallgather(in, int(n), MPI_FLOAT, outData, int(n), MPI_FLOAT,
                              comm->a2a, r);
      });
}

extern "C" moe_rt_status moe_rt_reduce_scatter(moe_rt_stream stream,
                                               moe_rt_comm comm,
                                               const moe_rt_tensor *send,
                                               moe_rt_tensor *recv) {
  if (!stream || !comm)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_reduce_scatter: NULL argument");
  if (moe_rt_status s = checkTensor(send, "moe_rt_reduce_scatter"))
    return s;
  if (moe_rt_status s = checkTensor(recv, "moe_rt_reduce_scatter"))
    return s;
  int64_t n = moe_rt_tensor_numel(recv);
  if (moe_rt_tensor_numel(send) != n * comm->size)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_reduce_scatter: send must hold group size x recv");
  const float *in = static_cast<const float *>(send->data);
  float *outData = static_cast<float *>(recv->data);
  // FSMoE's reduce-scatter belongs to the MoE layer's pipeline, like the
  // all-to-alls: high priority, same communicator class.
  return enqueueCollective(stream, comm, comm->a2a, ReduceScatter, n * 4, false,
                           [=](MPI_Request *r) {
                             return MPI_Ireduce_scatter_block(
                                 in, outData, int(n), MPI_FLOAT, MPI_SUM,
                                 comm->a2a, r);
                           });
}
