//===- Liveness.h - which ranks stopped answering --------------*- C++ -*-===//
//
// Anything that outlives its timeout because of another rank — a
// collective, NCCL work, an event wait or a synchronize whose stream waits
// on a collective — is turned into an error that names the culprit: the
// world ranks that do not answer a liveness probe. Every rank runs the
// probe on its first timeout (each sends a token to every other on a
// duplicate of MPI_COMM_WORLD that only probes use, and waits a window for
// theirs), so the survivors of a dead or stopped rank, which all time out
// at about the same moment, all answer each other and name the same silent
// ranks. A send or recv names its peer instead (only the pair takes part).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_MPI_LIVENESS_H
#define MOE_RT_SRC_MPI_LIVENESS_H

#include "Communicator.h"

#include <string>

namespace moe_rt::mpi {

/// Opens the probes' channel and makes the streams' timeouts name silent
/// ranks (Backend.h's stall diagnosis). Collective over MPI_COMM_WORLD:
/// moe_rt_comm_create_world calls it; only its first call does anything.
void openWorldLiveness();

/// "rank(s) 1, 3 did not respond": the world ranks that did not answer a
/// probe, or "" when all did (or MPI is not started). A result naming
/// ranks is kept (the job is broken; every later timeout names them too);
/// otherwise a later timeout probes again. `timeoutSeconds` sizes the
/// window peers have to answer.
std::string silentRanks(double timeoutSeconds);

/// Seconds moe_rt_mpi_abort waits before ending the job once a probe found
/// silent ranks, so that the other survivors, still in the same probe,
/// report too (0 otherwise).
double abortGrace();

/// The error for a collective that outlived the communicator's timeout:
/// names the ranks that do not answer a liveness probe, and marks the
/// communicator failed (its requests cannot be cancelled).
moe_rt_status timedOut(moe_rt_comm_impl &c, const char *what,
                       std::string &message);

/// The error for a send or recv that outlived the communicator's timeout.
/// Only the peer takes part in it, so there is no probe (the other ranks
/// are busy elsewhere and would not answer it): the message names the
/// peer. Marks the communicator failed like any timeout (MPI may still
/// complete the request later).
moe_rt_status p2pTimedOut(moe_rt_comm_impl &c, const std::string &what,
                          int peer, std::string &message);

} // namespace moe_rt::mpi

#endif // MOE_RT_SRC_MPI_LIVENESS_H
