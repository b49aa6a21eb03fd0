//===- Liveness.cpp - which ranks stopped answering -----------------------===//

#include "Liveness.h"

#include "../Backend.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

using namespace moe_rt;

namespace moe_rt::mpi {
namespace {

/// The probes' channel and the last answer.
struct World {
  std::mutex mutex;
  MPI_Comm probe = MPI_COMM_NULL;
  int rank = 0, size = 1;
  /// The last probe's silent ranks ("" if all answered) and its window.
  std::string silent;
  double window = 0;
  Clock::time_point probedAt;
  bool probed = false;
};

World &world() {
  static World w;
  return w;
}

constexpr int kProbeTag = 77;

/// How long peers have to answer: long enough for the survivors of one
/// failure, which time out within moments of each other, to meet in the
/// probe; short, as it delays every error that names a silent rank.
double windowFor(double timeoutSeconds) {
  if (timeoutSeconds <= 0)
    return 5.0;
  return std::clamp(timeoutSeconds / 2, std::min(2.0, timeoutSeconds), 5.0);
}

/// One probe round: every rank sends a token to every other, then waits
/// `window` seconds for theirs. "1, 3" for the ranks not heard from.
std::string probe(World &w, double window) {
  std::vector<int> tokens(w.size, 0), mine(1, w.rank);
  std::vector<MPI_Request> recvs(w.size, MPI_REQUEST_NULL),
      sends(w.size, MPI_REQUEST_NULL);
  for (int p = 0; p < w.size; ++p) {
    if (p == w.rank)
      continue;
    MPI_Irecv(&tokens[p], 1, MPI_INT, p, kProbeTag, w.probe, &recvs[p]);
    MPI_Isend(mine.data(), 1, MPI_INT, p, kProbeTag, w.probe, &sends[p]);
  }
  auto deadline = Clock::now() + std::chrono::duration<double>(window);
  std::vector<bool> heard(w.size, false);
  heard[w.rank] = true;
  while (Clock::now() < deadline) {
    bool all = true;
    for (int p = 0; p < w.size; ++p) {
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
  for (int p = 0; p < w.size; ++p)
    if (!heard[p])
      missing += (missing.empty() ? "" : ", ") + std::to_string(p);
  return missing;
}

std::string diagnose(double timeoutSeconds) {
  return silentRanks(timeoutSeconds);
}

} // namespace

void openWorldLiveness() {
  World &w = world();
  std::lock_guard<std::mutex> lock(w.mutex);
  if (w.probe != MPI_COMM_NULL)
    return;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &w.probe) != MPI_SUCCESS) {
    w.probe = MPI_COMM_NULL;
    return;
  }
  MPI_Comm_set_errhandler(w.probe, MPI_ERRORS_RETURN);
  MPI_Comm_rank(w.probe, &w.rank);
  MPI_Comm_size(w.probe, &w.size);
  setStallDiagnosis(&diagnose);
}

std::string silentRanks(double timeoutSeconds) {
  World &w = world();
  // One probe at a time; the threads that time out together (a stream's
  // wait, the pool's collective) share its answer.
  std::lock_guard<std::mutex> lock(w.mutex);
  if (w.probe == MPI_COMM_NULL)
    return "";
  std::chrono::duration<double> since = Clock::now() - w.probedAt;
  bool recent = w.probed && since.count() < 2 * w.window;
  if (w.silent.empty() && !recent) {
    w.window = windowFor(timeoutSeconds);
    w.silent = probe(w, w.window);
    w.probedAt = Clock::now();
    w.probed = true;
  }
  return w.silent.empty() ? "" : "rank(s) " + w.silent + " did not respond";
}

double abortGrace() {
  World &w = world();
  std::lock_guard<std::mutex> lock(w.mutex);
  return w.silent.empty() ? 0 : w.window + 1;
}

moe_rt_status timedOut(moe_rt_comm_impl &c, const char *what,
                       std::string &message) {
  std::string silent = silentRanks(c.timeoutSeconds);
  message = std::string(what) + " on rank " + std::to_string(c.rank) +
            " timed out after " + std::to_string(c.timeoutSeconds) + " s; " +
            (silent.empty()
                 ? std::string("every rank answered a liveness probe, so a "
                               "rank is stuck in a different collective")
                 : silent);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.failed = message;
  return MOE_RT_TIMEOUT;
}

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

} // namespace moe_rt::mpi
