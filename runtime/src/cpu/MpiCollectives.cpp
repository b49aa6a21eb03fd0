//===- MpiCollectives.cpp - bounded MPI collectives on streams ------------===//
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
// Point-to-point send / recv run on a fourth MPI communicator of the group
// (p2p), so that they never match a collective; see "Point-to-point" below.
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
#include <map>
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
  MPI_Comm a2a = MPI_COMM_NULL, ar = MPI_COMM_NULL, probe = MPI_COMM_NULL,
           p2p = MPI_COMM_NULL;
  int rank = 0, size = 1;
  double timeoutSeconds = 0;
  bool checkShapes = false;
  std::mutex mutex;
  std::string failed; // set once a collective timed out
  /// Buffers of point-to-point requests that timed out and may still be
  /// written by MPI: kept until the communicator goes (then MPI_Abort or
  /// MPI_Finalize ends them).
  std::vector<std::shared_ptr<void>> orphans;
#ifdef MOE_RT_HAVE_CUDA
  /// The NCCL communicators by CommClass, created on first CUDA use.
  std::shared_ptr<NcclWatch> nccl[2];
  /// Two-rank NCCL communicators with each peer used by moe_rt_send/recv.
  std::map<int, std::shared_ptr<NcclWatch>> ncclPairs;
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
    for (MPI_Comm *c : {&a2a, &ar, &probe, &p2p})
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

/// The error for a send or recv that outlived the communicator's timeout.
/// Only the peer takes part in it, so there is no group-wide probe (the
/// other ranks are busy elsewhere and would not answer it): the message
/// names the peer. Marks the communicator failed like any timeout (MPI may
/// still complete the request later).
moe_rt_status p2pTimedOut(moe_rt_comm_impl &c, const std::string &what,
                          int peer, std::string &message) {
  message = what + " on rank " + std::to_string(c.rank) + " timed out after " +
            std::to_string(c.timeoutSeconds) + " s; rank " +
            std::to_string(peer) +
            " did not respond (it posted no matching call: it is dead or "
            "stuck, or issues its sends and receives in another order)";
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.failed.empty())
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

/// True (with the message) when an earlier collective on `c` timed out:
/// its requests are still in flight, so nothing more may run on it.
bool failedEarlier(moe_rt_comm c, std::string &message,
                   moe_rt_status &status) {
  std::lock_guard<std::mutex> lock(c->mutex);
  if (c->failed.empty())
    return false;
  message = "communicator failed earlier: " + c->failed;
  status = MOE_RT_BACKEND_ERROR;
  return true;
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
      if (failedEarlier(c, message, status))
        return true;
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
  for (MPI_Comm *dup : {&c->a2a, &c->ar, &c->probe, &c->p2p})
    if (int rc = MPI_Comm_dup(base, dup); rc != MPI_SUCCESS)
      return fail(MOE_RT_BACKEND_ERROR, "MPI_Comm_dup: " + mpiError(rc));
  for (MPI_Comm comm : {c->a2a, c->ar, c->probe, c->p2p})
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
/// With peer >= 0 it is a point-to-point exchange and a timeout names the
/// peer instead of probing the group.
moe_rt_status waitHost(moe_rt_comm_impl &c, MPI_Request &request,
                       const std::string &what, int peer = -1) {
  auto start = Clock::now();
  for (;;) {
    int done = 0;
    if (int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        rc != MPI_SUCCESS)
      return fail(MOE_RT_BACKEND_ERROR, what + " failed: " + mpiError(rc));
    if (done)
      return ok();
    std::chrono::duration<double> waited = Clock::now() - start;
    if (c.timeoutSeconds > 0 && waited.count() > c.timeoutSeconds) {
      std::string message;
      moe_rt_status status = peer >= 0
                                 ? p2pTimedOut(c, what, peer, message)
                                 : timedOut(c, what.c_str(), message);
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

// --- Point-to-point -------------------------------------------------------
//
// moe_rt_send / moe_rt_recv use the group's p2p MPI communicator, which no
// collective uses, so a transfer never matches a collective whatever the
// pool reorders. MPI matches the messages of one (communicator, source,
// tag) in the order they were sent (non-overtaking), so the n-th send from
// a rank to a peer meets the peer's n-th recv from that rank: no sequence
// numbers are needed. The shape-check headers travel on one tag per
// direction, so that two ranks sending to each other at once never match a
// send's header with a recv's; the data on a third; the NCCL pair id (CUDA)
// on a fourth.
enum P2PTag : int {
  HeaderToReceiver = 1,
  HeaderToSender = 2,
  P2PData = 3,
  NcclPairId = 4
};

/// One side of a transfer and the buffers MPI writes while it runs (kept
/// alive in the group's orphans if it times out).
struct P2PTransfer {
  bool sending = false;
  int peer = -1;
  void *data = nullptr;
  int64_t bytes = 0, dtype = 0;
  P2PHeader mine, theirs;
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};

  std::string what() const {
    return (sending ? "send to rank " : "recv from rank ") +
           std::to_string(peer);
  }
  /// Sends this side's header, receives the peer's.
  int postHeaders(MPI_Comm comm) {
    mine.kind = sending ? Send : Recv;
    mine.bytes = bytes;
    mine.dtype = dtype;
    static_assert(sizeof(P2PHeader) == 3 * sizeof(int64_t), "wire format");
    int rc = MPI_Isend(&mine, 3, MPI_INT64_T, peer,
                       sending ? HeaderToReceiver : HeaderToSender, comm,
                       &requests[0]);
    if (rc == MPI_SUCCESS)
      rc = MPI_Irecv(&theirs, 3, MPI_INT64_T, peer,
                     sending ? HeaderToSender : HeaderToReceiver, comm,
                     &requests[1]);
    return rc;
  }
  /// The same message on both ranks if the headers disagree.
  std::string mismatch(int rank) const {
    return sending ? p2pMismatch(rank, mine, peer, theirs)
                   : p2pMismatch(peer, theirs, rank, mine);
  }
  /// The data. A synchronous send (MPI_Issend) completes only once the
  /// peer's recv has matched it, whatever the size, so a send behaves the
  /// same on MPI as on NCCL (where it waits for the recv) and a wrong call
  /// order shows up at once instead of only past MPI's eager limit.
  int postData(MPI_Comm comm) {
    requests[1] = MPI_REQUEST_NULL;
    return sending ? MPI_Issend(data, int(bytes), MPI_BYTE, peer, P2PData,
                                comm, &requests[0])
                   : MPI_Irecv(data, int(bytes), MPI_BYTE, peer, P2PData,
                               comm, &requests[0]);
  }
  /// After a timeout: best-effort cancel (a recv must not write the tensor
  /// later), then keep the buffers alive with the group.
  static void orphan(moe_rt_comm_impl &c, std::shared_ptr<P2PTransfer> t) {
    for (MPI_Request &r : t->requests)
      if (r != MPI_REQUEST_NULL)
        MPI_Cancel(&r);
    std::lock_guard<std::mutex> lock(c.mutex);
    c.orphans.push_back(std::move(t));
  }
};

/// A send or recv as non-blocking steps on a CPU stream: [header exchange,]
/// data, each tested to the communicator's timeout.
class P2PSteps {
public:
  P2PSteps(moe_rt_comm c, std::shared_ptr<P2PTransfer> t)
      : c(c), t(std::move(t)) {}

  bool operator()(std::string &message, moe_rt_status &status) {
    if (state == Start) {
      start = Clock::now();
      if (failedEarlier(c, message, status))
        return true;
      if (c->checkShapes) {
        if (int rc = t->postHeaders(c->p2p); rc != MPI_SUCCESS)
          return mpiFailed(rc, message, status);
        state = Checking;
        return false;
      }
      return postData(message, status);
    }
    MPI_Status statuses[2];
    int done = 0;
    if (int rc = MPI_Testall(2, t->requests, &done, statuses);
        rc != MPI_SUCCESS) {
      if (rc == MPI_ERR_IN_STATUS)
        for (MPI_Status &st : statuses)
          if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != MPI_ERR_PENDING)
            rc = st.MPI_ERROR;
      return mpiFailed(rc, message, status);
    }
    if (!done) {
      std::chrono::duration<double> waited = Clock::now() - start;
      if (c->timeoutSeconds > 0 && waited.count() > c->timeoutSeconds) {
        P2PTransfer::orphan(*c, t);
        status = p2pTimedOut(*c, t->what(), t->peer, message);
        return true;
      }
      return false;
    }
    if (state == Checking) {
      message = t->mismatch(c->rank);
      if (!message.empty()) {
        status = MOE_RT_INVALID_ARGUMENT;
        return true;
      }
      return postData(message, status);
    }
    if (!t->sending) {
      // Without shape checks a shorter message is received silently by MPI.
      int got = 0;
      MPI_Get_count(&statuses[0], MPI_BYTE, &got);
      if (got != t->bytes) {
        message = "send/recv mismatch: rank " + std::to_string(c->rank) +
                  " received " + std::to_string(got) + " B from rank " +
                  std::to_string(t->peer) + " into a recv of " +
                  std::to_string(t->bytes) + " B";
        status = MOE_RT_INVALID_ARGUMENT;
        return true;
      }
    }
    status = MOE_RT_OK;
    return true;
  }

private:
  /// Posts the data; true (finished, with the error) if MPI refused.
  bool postData(std::string &message, moe_rt_status &status) {
    if (int rc = t->postData(c->p2p); rc != MPI_SUCCESS)
      return mpiFailed(rc, message, status);
    state = Running;
    return false;
  }

  bool mpiFailed(int rc, std::string &message, moe_rt_status &status) {
    int cls = 0;
    MPI_Error_class(rc, &cls);
    if (cls == MPI_ERR_TRUNCATE) {
      // Without shape checks: the peer sent more than this recv holds.
      message = "send/recv mismatch: rank " + std::to_string(t->peer) +
                " sent rank " + std::to_string(c->rank) +
                " more than its recv of " + std::to_string(t->bytes) + " B";
      status = MOE_RT_INVALID_ARGUMENT;
    } else {
      message = t->what() + " on rank " + std::to_string(c->rank) +
                " failed: " + mpiError(rc);
      status = MOE_RT_BACKEND_ERROR;
    }
    return true;
  }

  enum State { Start, Checking, Running };
  moe_rt_comm c;
  std::shared_ptr<P2PTransfer> t;
  State state = Start;
  Clock::time_point start;
};


#ifdef MOE_RT_HAVE_CUDA

/// One NCCL communicator of a group and what CUDA streams poll about it
/// (Backend.h's CommWatch). Owned by the group; streams hold weak
/// references, and the group detaches it before freeing the communicator.
class NcclWatch final : public CommWatch {
public:
  /// `peer` >= 0: the two-rank communicator with that rank of the group.
  NcclWatch(moe_rt_comm_impl *c, nccl::Comm *comm, int peer = -1)
      : c(c), comm(comm), peer(peer) {}

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
    if (peer >= 0) {
      // Only the peer takes part in a pair's work: name it, no group probe.
      nccl::abortComm(comm);
      return markFailed(nccl::label(comm) + " on rank " +
                        std::to_string(c->rank) + ": " + why +
                        "; the communicator was aborted; rank " +
                        std::to_string(peer) +
                        " did not respond (no matching send/recv, or it is "
                        "dead or stuck)");
    }
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
  int peer;
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

/// The two-rank NCCL communicator of this rank and `peer`, created on
/// their first CUDA send/recv. Only the two take part (the rest of the
/// group is not at this call, so the group's communicators could not be
/// created here): the lower rank makes the unique id and sends it to the
/// higher over the p2p MPI communicator, bounded by the timeout.
moe_rt_status pairNcclOf(moe_rt_comm c, int peer,
                         std::shared_ptr<NcclWatch> &out) {
  std::shared_ptr<NcclWatch> &slot = c->ncclPairs[peer];
  if (slot) {
    out = slot;
    if (!slot->get())
      return fail(MOE_RT_BACKEND_ERROR, "the NCCL communicator with rank " +
                                            std::to_string(peer) +
                                            " was aborted");
    return ok();
  }
  bool root = c->rank < peer;
  auto buffer = std::make_shared<std::vector<char>>(nccl::kUniqueIdBytes + 1);
  std::string rootError;
  if (root) {
    if (nccl::makeUniqueId(buffer->data()) == MOE_RT_OK)
      (*buffer)[nccl::kUniqueIdBytes] = 1;
    else
      rootError = moe_rt_last_error();
  }
  MPI_Request request;
  int rc = root ? MPI_Isend(buffer->data(), int(buffer->size()), MPI_BYTE,
                            peer, NcclPairId, c->p2p, &request)
                : MPI_Irecv(buffer->data(), int(buffer->size()), MPI_BYTE,
                            peer, NcclPairId, c->p2p, &request);
  if (rc != MPI_SUCCESS)
    return fail(MOE_RT_BACKEND_ERROR,
                "exchanging the NCCL id with rank " + std::to_string(peer) +
                    ": " + mpiError(rc));
  if (moe_rt_status st =
          waitHost(*c, request,
                   "exchanging the NCCL id with rank " + std::to_string(peer),
                   peer)) {
    std::lock_guard<std::mutex> lock(c->mutex);
    c->orphans.push_back(buffer); // MPI may still write it
    return st;
  }
  if (!(*buffer)[nccl::kUniqueIdBytes])
    return fail(MOE_RT_BACKEND_ERROR,
                "rank " + std::to_string(root ? c->rank : peer) +
                    " could not create an NCCL unique id" +
                    (rootError.empty() ? std::string() : ": " + rootError));
  int lo = std::min(c->rank, peer), hi = std::max(c->rank, peer);
  std::string label = "point-to-point NCCL communicator of group ranks " +
                      std::to_string(lo) + " and " + std::to_string(hi) +
                      " (group of " + worldRanks(*c) + ")";
  nccl::Comm *comm = nullptr;
  if (moe_rt_status st = nccl::init(buffer->data(), 2, root ? 0 : 1,
                                    c->timeoutSeconds, label, &comm)) {
    std::string why = moe_rt_last_error();
    if (st != MOE_RT_TIMEOUT)
      return fail(st, why);
    std::string message;
    p2pTimedOut(*c, "creating the " + label, peer, message);
    return fail(st, why + "; " + message);
  }
  slot = std::make_shared<NcclWatch>(c, comm, peer);
  out = slot;
  return ok();
}

/// A send or recv on a CUDA stream: the shape check over MPI when the call
/// is made, then ncclSend / ncclRecv on the pair's communicator.
moe_rt_status runNcclP2P(moe_rt_stream stream, moe_rt_comm c,
                         std::shared_ptr<P2PTransfer> t) {
  if (moe_rt_status st = refuseIfFailed(*c))
    return st;
  if (c->checkShapes) {
    if (int rc = t->postHeaders(c->p2p); rc != MPI_SUCCESS)
      return fail(MOE_RT_BACKEND_ERROR,
                  "shape check of " + t->what() + ": " + mpiError(rc));
    for (MPI_Request &r : t->requests)
      if (moe_rt_status st =
              waitHost(*c, r, "shape check of " + t->what(), t->peer)) {
        P2PTransfer::orphan(*c, t);
        return st;
      }
    std::string message = t->mismatch(c->rank);
    if (!message.empty())
      return fail(MOE_RT_INVALID_ARGUMENT, message);
  }
  std::shared_ptr<NcclWatch> watch;
  if (moe_rt_status st = pairNcclOf(c, t->peer, watch))
    return st;
  int pairPeer = c->rank < t->peer ? 1 : 0; // the peer's rank in the pair
  moe_rt_status st =
      t->sending
          ? nccl::send(watch->get(), stream, t->data, t->bytes, pairPeer)
          : nccl::recv(watch->get(), stream, t->data, t->bytes, pairPeer);
  if (st)
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
  for (auto &pair : ncclPairs)
    nccl::destroy(pair.second->detach());
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
  std::string why = checkPeer(comm->size, comm->rank, peer);
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
  auto t = std::make_shared<P2PTransfer>();
  t->sending = sending;
  t->peer = peer;
  t->data = tensor->data;
  t->bytes = bytes;
  t->dtype = tensor->dtype;
  if (onCuda(stream)) {
#ifdef MOE_RT_HAVE_CUDA
    return runNcclP2P(stream, comm, std::move(t));
#endif
  }
  auto steps = std::make_shared<P2PSteps>(comm, std::move(t));
  return stream->impl->enqueueAsync(
      [steps](std::string &message, moe_rt_status &status) {
        return (*steps)(message, status);
      },
      lowPriority(sending ? Send : Recv));
}

extern "C" moe_rt_status moe_rt_send(moe_rt_stream stream, moe_rt_comm comm,
                                     const moe_rt_tensor *tensor, int peer) {
  return pointToPoint(stream, comm, tensor, peer, true);
}

extern "C" moe_rt_status moe_rt_recv(moe_rt_stream stream, moe_rt_comm comm,
                                     moe_rt_tensor *tensor, int peer) {
  return pointToPoint(stream, comm, tensor, peer, false);
}
