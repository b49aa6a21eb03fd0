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

} // namespace mlir::moe

#endif // MOE_ANALYSIS_LISTSCHEDULER_H
