//===- NcclGroups.cpp - the NCCL communicators a group owns ---------------===//

#include "NcclGroups.h"

#include "../Backend.h"
#include "../CollectivePlan.h"
#include "../Error.h"
#include "CollectiveSteps.h"
#include "Liveness.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

using namespace moe_rt;
using namespace moe_rt::coll;

namespace moe_rt::mpi {

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
    std::string silent = silentRanks(c->timeoutSeconds);
    nccl::abortComm(comm);
    return markFailed(
        nccl::label(comm) + " on rank " + std::to_string(c->rank) + ": " +
        why + "; the communicator was aborted; " +
        (silent.empty()
             ? std::string("every rank answered a liveness probe, so a rank "
                           "is stuck elsewhere")
             : silent));
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
static std::string worldRanks(moe_rt_comm_impl &c) {
  if (c.solo)
    return "world rank 0 (solo, no MPI)";
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
static moe_rt_status ncclOf(moe_rt_comm c, CommClass cls,
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
  if (!c->solo) { // one rank has the id already
    MPI_Request request;
    if (int rc = MPI_Ibcast(buffer, int(sizeof buffer), MPI_BYTE, 0, c->probe,
                            &request);
        rc != MPI_SUCCESS)
      return fail(MOE_RT_BACKEND_ERROR,
                  "broadcasting the NCCL unique id: " + mpiError(rc));
    if (moe_rt_status st = waitHost(*c, request, "broadcasting the NCCL id"))
      return st;
  }
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
static moe_rt_status checkSignature(moe_rt_comm c, int64_t kind, int64_t bytes) {
  if (!c->checkShapes() || c->solo) // one rank agrees with itself
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

moe_rt_status runNccl(moe_rt_stream stream, moe_rt_comm c, int64_t kind,
                      int64_t bytes,
                      const std::function<moe_rt_status(nccl::Comm *)> &call) {
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
static moe_rt_status pairNcclOf(moe_rt_comm c, int peer,
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
  if (c->solo)
    return refuseSolo(*t);
  if (c->checkShapes()) {
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

void destroyNccl(moe_rt_comm_impl &c) {
  for (auto &watch : c.nccl)
    if (watch)
      nccl::destroy(watch->detach());
  for (auto &pair : c.ncclPairs)
    nccl::destroy(pair.second->detach());
}

} // namespace moe_rt::mpi
