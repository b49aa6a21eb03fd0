//===- CommCpuShare.h - what communication takes from compute ---*- C++ -*-===//
//
// On a CPU cluster a collective is not free for the compute stream: TCP,
// the kernel's packet processing and MPI's progress (the runtime's pool
// thread polls its requests) run on the same cores as the GEMMs. This
// measures the share of compute a running all-to-all takes, the way a step
// runs them: a compute thread doing GEMMs back to back while the
// runtime's own all-to-alls (moe_rt_all_to_all on a pool stream, over all
// ranks) run -- against the same compute thread beside an idle pool,
// interleaved. The converse too: the pool thread that progresses MPI shares
// the core with the GEMMs, so the same all-to-alls take longer beside them
// than with the compute thread asleep, and longer still or not when only
// some ranks compute (the odd ones).
// The profile's `comm_cpu_share`, `comm_stretch` and `comm_stretch_partial`
// (docs/profile-format.md).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_PROFILE_COMMCPUSHARE_H
#define MOE_PROFILE_COMMCPUSHARE_H

#include <mpi.h>

#include <string>

namespace moe_profile {

struct CommCpuShare {
  /// 1 - (GEMMs per second while all-to-alls run) / (GEMMs per second
  /// beside an idle thread), the median over rounds, averaged over ranks;
  /// clamped to [0, 0.9].
  double share = 0;
  double gemmsPerSecondAlone = 0, gemmsPerSecondBesideComm = 0;
  /// The converse: (all-to-all time while the GEMMs run) / (its time with
  /// the compute thread asleep), the median over rounds, averaged over
  /// ranks; clamped to [1, 100]. The profile's `comm_stretch`.
  double stretch = 1;
  /// The same with the GEMMs running on the odd ranks only: how much
  /// longer a collective takes when some ranks of its group compute and
  /// the others do not (each rank's part waits for the computing ranks'
  /// pool threads). The profile's `comm_stretch_partial`; `stretch` with
  /// one rank.
  double stretchPartial = 1;
  /// One all-to-all's seconds, alone, beside the GEMMs on every rank and
  /// on the odd ranks only (medians).
  double commSecondsAlone = 0, commSecondsBesideCompute = 0,
         commSecondsBesidePartial = 0;
};

/// All ranks call it together (MPI initialized with moe_rt_mpi_init);
/// `bytes` is each all-to-all's send buffer per rank. Every rank gets the
/// same result; the error of a failed runtime call, else "".
std::string measureCommCpuShare(long bytes, int rounds, CommCpuShare &out);

/// The runtime's smallest collective: an all-to-all of one float per rank
/// on a pool stream, queued and waited for as a step does, `repeats` times
/// after 3 warm-up calls; `us` is the median, averaged over ranks. The
/// profile's `collective_latency_us` is what it takes beyond the fitted α.
std::string measureSmallCollective(int repeats, double &us);

/// The runtime's all-to-all (`allReduce` false) or all-reduce of `bytes`
/// per rank, as a step runs it: non-blocking MPI on a pool stream that
/// progresses it by polling, queued and waited for, one at a time after a
/// barrier; `us` is the median over `repeats` of the slowest rank's time
/// (as the sweeps time MPI's blocking collectives). The profile's
/// `runtime_collective_scale` compares it with the sweep's fit.
std::string measureRuntimeCollective(bool allReduce, long bytes, int repeats,
                                     double &us);

} // namespace moe_profile

#endif // MOE_PROFILE_COMMCPUSHARE_H
