//===- ListScheduler.h - in-order queues on shared resources ---*- C++ -*-===//
//
// The execution semantics of a scheduled step on plain numbers, shared by
// the IR simulator (Simulator.cpp) and the analytical FSMoE layer timelines
// (LayerTimeline.cpp), so that both predict with one set of rules:
// - every task occupies one stream (a resource: the compute stream, a
//   communication link) for its duration, one task at a time, never
//   preempted;
// - a stream holds one in-order queue, or two when it has low-priority
//   tasks (FlowMoE's pool, Alg. 2): the low-priority queue only starts a
//   task when no task of the other queue can start as early;
// - a task also waits for the tasks it depends on.
// List scheduling commits, again and again, the queue head that can start
// earliest; every uncommitted task then starts no earlier, which makes the
// pool's "no all-to-all ready" test exact.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_LISTSCHEDULER_H
#define MOE_ANALYSIS_LISTSCHEDULER_H

#include <cstdint>
#include <vector>

namespace mlir::moe {

struct QueuedTask {
  unsigned stream = 0;
  bool lowPriority = false;
  double durationUs = 0;
  /// Tasks (indices) that must end before this one starts.
  std::vector<unsigned> deps;
  /// Filled in by listSchedule.
  double startUs = 0, endUs = 0;
};

/// Schedules `tasks`, given in issue order (a stream's queues take its
/// tasks in this order). Returns false when no task can progress (a
/// dependency on a task queued behind it).
bool listSchedule(std::vector<QueuedTask> &tasks);

/// The same rules on a CPU cluster, where compute and communication share
/// the rank's core (HardwareProfile::commCpuShare, commStretch): an
/// event-driven run in which a compute task progresses at rate
/// 1 - commCpuShare x (collectives running on the rank's communication
/// streams, at most 0.95 in all), and a collective at rate 1 / commStretch
/// while a compute task runs, else 1 (the link sets its pace). A task's
/// durationUs is its work at full rate; its endUs - startUs is the
/// stretched time. With a share of 0 and a stretch of 1 it gives
/// listSchedule's timeline. `commStream[s]` says whether stream s is a
/// communication stream; `hostStream[s]` (empty: none) whether it is a
/// host planner's thread, which runs at its measured pace and neither
/// slows nor is slowed by the others (its solve time is measured on the
/// loaded machine).
bool contendedSchedule(std::vector<QueuedTask> &tasks,
                       const std::vector<bool> &commStream,
                       double commCpuShare, double commStretch = 1.0,
                       const std::vector<bool> &hostStream = {});

/// Every rank of a CPU cluster at once (docs/passes/moe-simulate.md, "Ranks
/// simulated jointly"): the same tasks on each rank, whose durations differ
/// only where routing gives the ranks different work. On top of
/// contendedSchedule's rules:
/// - a collective is posted on a rank when its stream starts it and runs
///   only once every rank of its group has posted it (the runtime's
///   non-blocking MPI: no rank finishes before the last one joins); it ends
///   on all of them at once;
/// - it progresses at 1 / commStretch while a compute task runs on every
///   rank of its group, at 1 / commStretchPartial while one runs on some of
///   them (each rank's pool thread, which progresses it, shares a core
///   with that rank's GEMMs, and every rank waits for the others' parts),
///   else at 1; two collectives running on one communication stream share
///   its link;
/// - a communication stream is the runtime's pool (CpuPoolStream.cpp): one
///   slot for its high-priority queue and one for the low one; a
///   low-priority task starts only when no high-priority task runs or can
///   start, but a high-priority task starts while a low one runs.
struct CoupledRanks {
  /// durationUs[r][t]: the work of task t on rank r at full rate.
  std::vector<std::vector<double>> durationUs;
  /// Per task: for a collective, each rank's group key (ranks with equal
  /// keys run it together); empty for any other task.
  std::vector<std::vector<int64_t>> groupKey;
  /// Filled in: per rank, each task's start (a collective's post) and end.
  std::vector<std::vector<double>> startUs, endUs;
};

/// Schedules `tasks` (issue order, streams, deps and priorities; their
/// durationUs is ignored) on every rank of `ranks` jointly. Returns false
/// when no task can progress.
bool coupledSchedule(const std::vector<QueuedTask> &tasks, CoupledRanks &ranks,
                     const std::vector<bool> &commStream, double commCpuShare,
                     double commStretch, double commStretchPartial,
                     const std::vector<bool> &hostStream);

} // namespace mlir::moe

#endif // MOE_ANALYSIS_LISTSCHEDULER_H
