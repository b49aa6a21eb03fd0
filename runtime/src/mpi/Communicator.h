//===- Communicator.h - a group of ranks and what it owns -------*- C++ -*-===//
//
// moe_rt_comm: one group of MPI ranks (the world or a split) with four MPI
// communicators, so that its traffic classes never match each other
// whatever order the communication pool runs them in: all-to-alls (a2a),
// all-reduces (ar), point-to-point transfers (p2p) and liveness probes
// (probe). A collective that outlives the group's timeout marks the group
// failed (its requests cannot be cancelled), and nothing more runs on it.
// With CUDA, the group also owns its NCCL communicators (NcclGroups.h).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_MPI_COMMUNICATOR_H
#define MOE_RT_SRC_MPI_COMMUNICATOR_H

#include "moe_rt/collectives.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace moe_rt::mpi {
class NcclWatch;
using Clock = std::chrono::steady_clock;
} // namespace moe_rt::mpi

struct moe_rt_comm_impl {
  MPI_Comm a2a = MPI_COMM_NULL, ar = MPI_COMM_NULL, probe = MPI_COMM_NULL,
           p2p = MPI_COMM_NULL;
  /// What moe_rt_comm_split splits, used by nothing else: a group is split
  /// on the host thread while the streams may run collectives on a2a/ar,
  /// and two threads' collectives on one MPI communicator may match in a
  /// different order on different ranks (a step-1 stall under load).
  MPI_Comm splits = MPI_COMM_NULL;
  int rank = 0, size = 1;
  /// A one-rank process that was not started by an MPI launcher: MPI is
  /// not initialised (Open MPI's singleton start-up forks an orted and
  /// costs 0.3-0.9 s here), the MPI communicators above stay null, and
  /// every collective is the local copy a one-rank group's collective is.
  bool solo = false;
  double timeoutSeconds = 0;
  /// Whether collectives exchange their (kind, size) signature first. One
  /// flag shared by a group and every group split from it, so that
  /// moe_rt_comm_end_shape_checks on the world ends them everywhere at the
  /// same step boundary.
  std::shared_ptr<std::atomic<bool>> checkShapesFlag =
      std::make_shared<std::atomic<bool>>(false);
  bool checkShapes() const { return checkShapesFlag->load(); }
  std::mutex mutex;
  std::string failed; // set once a collective timed out
  /// Buffers of point-to-point requests that timed out and may still be
  /// written by MPI: kept until the communicator goes (then MPI_Abort or
  /// MPI_Finalize ends them).
  std::vector<std::shared_ptr<void>> orphans;
#ifdef MOE_RT_HAVE_CUDA
  /// The NCCL communicators by CommClass, created on first CUDA use.
  std::shared_ptr<moe_rt::mpi::NcclWatch> nccl[2];
  /// Two-rank NCCL communicators with each peer used by moe_rt_send/recv.
  std::map<int, std::shared_ptr<moe_rt::mpi::NcclWatch>> ncclPairs;
#endif

  ~moe_rt_comm_impl();
};

namespace moe_rt::mpi {

/// Whether this process runs without MPI: one rank, no launcher
/// (moe_rt_mpi_init decided so).
bool soloProcess();

/// MPI's text for an error code.
std::string mpiError(int code);

/// True (with the message) when an earlier collective on `c` timed out:
/// its requests are still in flight, so nothing more may run on it.
bool failedEarlier(moe_rt_comm c, std::string &message,
                   moe_rt_status &status);

/// The same check for a call made on the host thread: the status, with
/// the message as the thread's last error.
moe_rt_status refuseIfFailed(moe_rt_comm_impl &c);

} // namespace moe_rt::mpi

#endif // MOE_RT_SRC_MPI_COMMUNICATOR_H
