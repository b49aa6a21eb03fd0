//===- Liveness.cpp - which ranks stopped answering -----------------------===//

#include "Liveness.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

using namespace moe_rt;

namespace moe_rt::mpi {

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
