//===- CollectiveSteps.cpp - MPI collectives polled to a deadline ---------===//

#include "CollectiveSteps.h"

#include "../Backend.h"
#include "../CollectivePlan.h"
#include "../Error.h"
#include "Liveness.h"

#include <memory>
#include <thread>

using namespace moe_rt;
using namespace moe_rt::coll;

namespace moe_rt::mpi {

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

namespace {

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
      if (c->checkShapes()) {
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

} // namespace

moe_rt_status enqueueCollective(moe_rt_stream stream, moe_rt_comm c,
                                MPI_Comm comm, int64_t kind, int64_t bytes,
                                bool lowPriority,
                                std::function<int(MPI_Request *)> post,
                                std::function<void()> local) {
  if (c->solo)
    return stream->impl->enqueueAsync(
        [local = std::move(local)](std::string &, moe_rt_status &status) {
          local();
          status = MOE_RT_OK;
          return true;
        },
        lowPriority);
  auto steps =
      std::make_shared<CollectiveSteps>(c, comm, kind, bytes, std::move(post));
  return stream->impl->enqueueAsync(
      [steps](std::string &message, moe_rt_status &status) {
        return (*steps)(message, status);
      },
      lowPriority);
}

moe_rt_status waitHost(moe_rt_comm_impl &c, MPI_Request &request,
                       const std::string &what, int peer) {
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

} // namespace moe_rt::mpi
