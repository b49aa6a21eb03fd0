//===- Liveness.h - which ranks stopped answering ---------------*- C++ -*-===//
//
// A collective or transfer that outlives its group's timeout is turned
// into an error that names the culprit: for a collective, the ranks that
// do not answer a liveness probe (every rank sends a token to every other
// on the group's probe communicator); for a send or recv, the peer.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_MPI_LIVENESS_H
#define MOE_RT_SRC_MPI_LIVENESS_H

#include "Communicator.h"

#include <string>

namespace moe_rt::mpi {

/// Ranks of `c` that did not answer a token within `window` seconds, as
/// "1, 3" ("" when all did).
std::string unresponsiveRanks(moe_rt_comm_impl &c, double window);

/// The error for a collective that outlived the communicator's timeout:
/// names the ranks that do not answer a liveness probe, and marks the
/// communicator failed (its requests cannot be cancelled).
moe_rt_status timedOut(moe_rt_comm_impl &c, const char *what,
                       std::string &message);

/// The error for a send or recv that outlived the communicator's timeout.
/// Only the peer takes part in it, so there is no group-wide probe (the
/// other ranks are busy elsewhere and would not answer it): the message
/// names the peer. Marks the communicator failed like any timeout (MPI may
/// still complete the request later).
moe_rt_status p2pTimedOut(moe_rt_comm_impl &c, const std::string &what,
                          int peer, std::string &message);

} // namespace moe_rt::mpi

#endif // MOE_RT_SRC_MPI_LIVENESS_H
