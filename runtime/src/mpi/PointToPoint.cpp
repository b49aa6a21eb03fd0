//===- PointToPoint.cpp - send / recv as non-blocking steps ---------------===//

#include "PointToPoint.h"

#include "../Backend.h"
#include "../Error.h"
#include "Liveness.h"

using namespace moe_rt;
using namespace moe_rt::coll;

namespace moe_rt::mpi {
namespace {

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
      if (c->checkShapes()) {
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

} // namespace

moe_rt_status refuseSolo(const P2PTransfer &t) {
  return fail(MOE_RT_INVALID_ARGUMENT,
              t.what() + ": a one-rank run started without mpirun has no "
                         "peer to exchange with");
}

moe_rt_status queueTransfer(moe_rt_stream stream, moe_rt_comm comm,
                            std::shared_ptr<P2PTransfer> t) {
  if (comm->solo)
    return refuseSolo(*t);
  bool sending = t->sending;
  auto steps = std::make_shared<P2PSteps>(comm, std::move(t));
  return stream->impl->enqueueAsync(
      [steps](std::string &message, moe_rt_status &status) {
        return (*steps)(message, status);
      },
      lowPriority(sending ? Send : Recv));
}

} // namespace moe_rt::mpi
