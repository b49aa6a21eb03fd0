//===- MpiCollectives.cpp - bounded MPI collectives on streams
//--------------===//
//
// Non-blocking MPI collectives polled to a deadline, so that no rank waits
// forever on a dead or stuck peer (FlowMoE App. K.3: a barrier with timeout
// detects the failed rank). On a timeout the communicator is marked failed
// and a liveness probe — every rank sends a token to every other on a
// dedicated communicator — names the ranks that did not answer.
//
// With the CUDA backend built, a collective on a CUDA stream runs with NCCL
// instead (src/cuda/NcclCollectives.cpp); this file keeps what the group
// owns: its NCCL communicators (created here on first CUDA use, the unique
// id broadcast over MPI), the shape check (over MPI, when the call is made)
// and the liveness probe that names dead ranks when NCCL work times out.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/collectives.h"

#include "../Backend.h"
#include "../CollectivePlan.h"
#include "../Error.h"
#ifdef MOE_RT_HAVE_CUDA
#include "../cuda/NcclCollectives.h"
#endif

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace moe_rt;
using namespace moe_rt::coll;

#ifdef MOE_RT_HAVE_CUDA
namespace {
class NcclWatch;
}
#endif

struct moe_rt_comm_impl {
  MPI_Comm a2a = MPI_COMM_NULL, ar = MPI_COMM_NULL, probe = MPI_COMM_NULL;
  int rank = 0, size = 1;
  double timeoutSeconds = 0;
  bool checkShapes = false;
  std::mutex mutex;
  std::string failed; // set once a collective timed out
#ifdef MOE_RT_HAVE_CUDA
  /// The NCCL communicators by CommClass, created on first CUDA use.
  std::shared_ptr<NcclWatch> nccl[2];
  void destroyNccl();
#endif

  ~moe_rt_comm_impl() {
#ifdef MOE_RT_HAVE_CUDA
    destroyNccl();
#endif
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

/// "" if every rank issued (kind, bytes), else the first difference.
std::string signatureMismatch(const moe_rt_comm_impl &c, int64_t kind,
                              int64_t bytes, const std::vector<int64_t> &all) {
  for (int p = 0; p < c.size; ++p)
    if (all[2 * p] != kind || all[2 * p + 1] != bytes)
      return "mismatch between ranks: rank " + std::to_string(p) +
             " issued " + kindName(all[2 * p]) + " of " +
             std::to_string(all[2 * p + 1]) + " B while rank " +
             std::to_string(c.rank) + " issued " + kindName(kind) + " of " +
             std::to_string(bytes) + " B";
  return "";
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
      message = signatureMismatch(*c, kind, bytes, all);
      if (!message.empty()) {
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

/// Waits for a non-blocking MPI call the host thread made (the CUDA path's
/// id broadcast and shape check) up to the communicator's timeout.
moe_rt_status waitHost(moe_rt_comm_impl &c, MPI_Request &request,
                       const char *what) {
  auto start = Clock::now();
  for (;;) {
    int done = 0;
    if (int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        rc != MPI_SUCCESS)
      return fail(MOE_RT_BACKEND_ERROR,
                  std::string(what) + " failed: " + mpiError(rc));
    if (done)
      return ok();
    std::chrono::duration<double> waited = Clock::now() - start;
    if (c.timeoutSeconds > 0 && waited.count() > c.timeoutSeconds) {
      std::string message;
      moe_rt_status status = timedOut(c, what, message);
      return fail(status, message);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

moe_rt_status refuseIfFailed(moe_rt_comm_impl &c) {
  std::lock_guard<std::mutex> lock(c.mutex);
  if (!c.failed.empty())
    return fail(MOE_RT_BACKEND_ERROR, "communicator failed earlier: " +
                                          c.failed);
  return MOE_RT_OK;
}

#ifdef MOE_RT_HAVE_CUDA

/// One NCCL communicator of a group and what CUDA streams poll about it
/// (Backend.h's CommWatch). Owned by the group; streams hold weak
/// references, and the group detaches it before freeing the communicator.
class NcclWatch final : public CommWatch {
public:
  NcclWatch(moe_rt_comm_impl *c, nccl::Comm *comm) : c(c), comm(comm) {}

  std::string poll() override {
    std::lock_guard<std::mutex> lock(mutex);
    if (!c || !comm)
      return "";
    std::string error = nccl::asyncError(comm);
    if (error.empty())
      return "";
    return markFailed(error + " on rank " + std::to_string(c->rank));
  }

  std::string onTimeout() override {
    std::lock_guard<std::mutex> lock(mutex);
    if (!c || !comm)
      return "";
    return abortTimedOut("its work did not finish");
  }

  /// An NCCL call that failed when it was made: a timeout probes liveness
  /// and aborts; an error (NCCL aborted the communicator) marks the group.
  moe_rt_status callFailed(moe_rt_status status) {
    std::string why = moe_rt_last_error();
    std::lock_guard<std::mutex> lock(mutex);
    if (!c || !comm)
      return fail(status, why);
    if (status == MOE_RT_TIMEOUT)
      return fail(status, abortTimedOut(why));
    return fail(status, markFailed(why));
  }

  nccl::Comm *detach() {
    std::lock_guard<std::mutex> lock(mutex);
    c = nullptr;
    nccl::Comm *owned = comm;
    comm = nullptr;
    return owned;
  }

  nccl::Comm *get() {
    std::lock_guard<std::mutex> lock(mutex);
    return comm;
  }

private:
  std::string abortTimedOut(const std::string &why) {
    double window = c->timeoutSeconds > 0 ? std::min(2.0, c->timeoutSeconds)
                                          : 2.0;
    std::string missing = unresponsiveRanks(*c, window);
    nccl::abortComm(comm);
    return markFailed(
        nccl::label(comm) + " on rank " + std::to_string(c->rank) + ": " +
        why + "; the communicator was aborted; " +
        (missing.empty()
             ? std::string("every rank answered a liveness probe, so a rank "
                           "is stuck elsewhere")
             : "rank(s) " + missing + " did not respond"));
  }

  std::string markFailed(std::string message) {
    std::lock_guard<std::mutex> lock(c->mutex);
    if (c->failed.empty())
      c->failed = message;
    return message;
  }

  std::mutex mutex;
  moe_rt_comm_impl *c;
  nccl::Comm *comm;
};

/// "world ranks 0, 2" for the messages and NCCL's logs.
std::string worldRanks(moe_rt_comm_impl &c) {
  MPI_Group group, world;
  MPI_Comm_group(c.probe, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> mine(c.size), theirs(c.size);
  for (int p = 0; p < c.size; ++p)
    mine[p] = p;
  MPI_Group_translate_ranks(group, c.size, mine.data(), world, theirs.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  std::string text;
  for (int r : theirs)
    text += (text.empty() ? "" : ", ") + std::to_string(r);
  return "world ranks " + text;
}

/// The group's NCCL communicator of `cls`, created on first use: rank 0
/// makes the unique id and broadcasts it over MPI (on the probe
/// communicator: the host thread issues these in program order on every
/// rank, and they never match the pool's collectives on a2a / ar).
moe_rt_status ncclOf(moe_rt_comm c, CommClass cls,
                     std::shared_ptr<NcclWatch> &out) {
  std::shared_ptr<NcclWatch> &slot = c->nccl[int(cls)];
  if (slot) {
    out = slot;
    if (!slot->get())
      return fail(MOE_RT_BACKEND_ERROR, "the group's NCCL communicator was "
                                        "aborted");
    return ok();
  }
  // The id, then whether rank 0 could make one (so that a failure there
  // fails every rank instead of leaving them waiting in the init).
  char buffer[nccl::kUniqueIdBytes + 1] = {};
  std::string rootError;
  if (c->rank == 0) {
    if (nccl::makeUniqueId(buffer) == MOE_RT_OK)
      buffer[nccl::kUniqueIdBytes] = 1;
    else
      rootError = moe_rt_last_error();
  }
  MPI_Request request;
  if (int rc = MPI_Ibcast(buffer, int(sizeof buffer), MPI_BYTE, 0, c->probe,
                          &request);
      rc != MPI_SUCCESS)
    return fail(MOE_RT_BACKEND_ERROR,
                "broadcasting the NCCL unique id: " + mpiError(rc));
  if (moe_rt_status st = waitHost(*c, request, "broadcasting the NCCL id"))
    return st;
  if (!buffer[nccl::kUniqueIdBytes])
    return fail(MOE_RT_BACKEND_ERROR,
                "rank 0 of the group could not create an NCCL unique id" +
                    (rootError.empty() ? std::string() : ": " + rootError));
  std::string label = std::string(commClassName(cls)) +
                      " NCCL communicator of the group of " + worldRanks(*c);
  nccl::Comm *comm = nullptr;
  if (moe_rt_status st = nccl::init(buffer, c->size, c->rank,
                                    c->timeoutSeconds, label, &comm)) {
    std::string why = moe_rt_last_error();
    if (st != MOE_RT_TIMEOUT)
      return fail(st, why);
    std::string message;
    timedOut(*c, ("creating the " + label).c_str(), message);
    return fail(st, why + "; " + message);
  }
  slot = std::make_shared<NcclWatch>(c, comm);
  out = slot;
  return ok();
}

/// With shape checks on: every rank's (kind, bytes), exchanged over MPI
/// when the call is made (NCCL itself would hang or corrupt memory).
moe_rt_status checkSignature(moe_rt_comm c, int64_t kind, int64_t bytes) {
  if (!c->checkShapes)
    return MOE_RT_OK;
  int64_t mine[2] = {kind, bytes};
  std::vector<int64_t> all(2 * c->size);
  MPI_Request request;
  if (int rc = MPI_Iallgather(mine, 2, MPI_INT64_T, all.data(), 2,
                              MPI_INT64_T, c->probe, &request);
      rc != MPI_SUCCESS)
    return fail(MOE_RT_BACKEND_ERROR, "shape check: " + mpiError(rc));
  if (moe_rt_status st = waitHost(*c, request, "shape check"))
    return st;
  std::string message = signatureMismatch(*c, kind, bytes, all);
  if (!message.empty())
    return fail(MOE_RT_INVALID_ARGUMENT, message);
  return MOE_RT_OK;
}

moe_rt_status checkCudaTensor(const moe_rt_tensor *t, const char *what) {
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

/// The common tail of a CUDA collective: refuse a failed group, check
/// signatures, get the communicator, make the call, watch the stream.
template <class Call>
moe_rt_status runNccl(moe_rt_stream stream, moe_rt_comm c, int64_t kind,
                      int64_t bytes, Call call) {
  if (moe_rt_status st = refuseIfFailed(*c))
    return st;
  if (moe_rt_status st = checkSignature(c, kind, bytes))
    return st;
  std::shared_ptr<NcclWatch> watch;
  if (moe_rt_status st = ncclOf(c, commClassOf(kind), watch))
    return st;
  if (moe_rt_status st = call(watch->get()))
    return watch->callFailed(st);
  watchCudaStream(stream, watch);
  return ok();
}

#endif // MOE_RT_HAVE_CUDA

} // namespace

#ifdef MOE_RT_HAVE_CUDA
void moe_rt_comm_impl::destroyNccl() {
  for (auto &watch : nccl)
    if (watch)
      nccl::destroy(watch->detach());
}
#endif

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

extern "C" moe_rt_status moe_rt_comm_node_rank(moe_rt_comm comm,
                                               int *local_rank,
                                               int *local_size) {
  if (!comm || !local_rank || !local_size)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_comm_node_rank: NULL argument");
  MPI_Comm node;
  if (int rc = MPI_Comm_split_type(comm->probe, MPI_COMM_TYPE_SHARED,
                                   comm->rank, MPI_INFO_NULL, &node);
      rc != MPI_SUCCESS)
    return fail(MOE_RT_BACKEND_ERROR, "MPI_Comm_split_type: " + mpiError(rc));
  MPI_Comm_rank(node, local_rank);
  MPI_Comm_size(node, local_size);
  MPI_Comm_free(&node);
  return ok();
}

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
  int64_t bytes = range.count * 4;
  if (cuda) {
#ifdef MOE_RT_HAVE_CUDA
    return runNccl(stream, comm, AllReduce, bytes, [&](nccl::Comm *nc) {
      return nccl::allReduce(nc, stream, data, range.count);
    });
#else
    return noCuda("moe_rt_all_reduce");
#endif
  }
  if (range.count > std::numeric_limits<int>::max())
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_all_reduce: more elements than MPI's int counts");
  int count = static_cast<int>(range.count);
  return enqueueCollective(
      stream, comm, comm->ar, AllReduce, bytes, lowPriority(AllReduce),
      [data, count, comm](MPI_Request *r) {
        return MPI_Iallreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM,
                              comm->ar, r);
      });
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
    return runNccl(stream, comm, kind, bytes, [&](nccl::Comm *nc) {
      return nccl::allToAll(nc, stream, in, outData, plan);
    });
#else
    return noCuda(what);
#endif
  }
  if (!fitsInt(plan))
    return fail(MOE_RT_INVALID_ARGUMENT,
                std::string(what) + ": counts exceed MPI's int counts");
  auto toInt = [](const std::vector<int64_t> &v) {
    return std::vector<int>(v.begin(), v.end());
  };
  std::vector<int> sc = toInt(plan.sendCount), sd = toInt(plan.sendOffset),
                   rc = toInt(plan.recvCount), rd = toInt(plan.recvOffset);
  if (kind == AllToAll) {
    int part = sc.empty() ? 0 : sc[0];
    return enqueueCollective(
        stream, comm, comm->a2a, kind, bytes, false, [=](MPI_Request *r) {
          return MPI_Ialltoall(in, part, MPI_FLOAT, outData, part, MPI_FLOAT,
                               comm->a2a, r);
        });
  }
  return enqueueCollective(
      stream, comm, comm->a2a, kind, bytes, false, [=](MPI_Request *r) {
        return MPI_Ialltoallv(in, sc.data(), sd.data(), MPI_FLOAT, outData,
                              rc.data(), rd.data(), MPI_FLOAT, comm->a2a, r);
      });
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
                std::to_string(comm->size)
          : planAllToAll(comm->size, n, send->shape[0],
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
      planAllToAllV(comm->size, send_rows, recv_rows, rowSend, send->shape[0],
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
  if (moe_rt_tensor_numel(recv) != n * comm->size)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_all_gather: recv must hold group size x send");
  const float *in = static_cast<const float *>(send->data);
  float *outData = static_cast<float *>(recv->data);
  if (cuda) {
#ifdef MOE_RT_HAVE_CUDA
    return runNccl(stream, comm, AllGather, n * 4, [&](nccl::Comm *nc) {
      return nccl::allGather(nc, stream, in, outData, n);
    });
#endif
  }
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
  bool cuda = onCuda(stream);
  if (moe_rt_status s = checkPair(cuda, send, recv, "moe_rt_reduce_scatter"))
    return s;
  int64_t n = moe_rt_tensor_numel(recv);
  if (moe_rt_tensor_numel(send) != n * comm->size)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_reduce_scatter: send must hold group size x recv");
  const float *in = static_cast<const float *>(send->data);
  float *outData = static_cast<float *>(recv->data);
  if (cuda) {
#ifdef MOE_RT_HAVE_CUDA
    return runNccl(stream, comm, ReduceScatter, n * 4, [&](nccl::Comm *nc) {
      return nccl::reduceScatter(nc, stream, in, outData, n);
    });
#endif
  }
  // FSMoE's reduce-scatter belongs to the MoE layer's pipeline, like the
  // all-to-alls: high priority, same communicator class.
  return enqueueCollective(stream, comm, comm->a2a, ReduceScatter, n * 4, false,
                           [=](MPI_Request *r) {
                             return MPI_Ireduce_scatter_block(
                                 in, outData, int(n), MPI_FLOAT, MPI_SUM,
                                 comm->a2a, r);
                           });
}
