//===- Simulator.h - timeline of a scheduled step ---------------*- C++ -*-===//
//
// Executes a scheduled step with the runtime's semantics, on durations from
// the cost model: each stream runs its tasks in issue order, one at a time
// (non-preemptive); a task also waits for the events its stream waited on
// before it; on a communication stream, all-reduce chunks form a
// low-priority queue that the pool issues only when no other communication
// task is ready (FlowMoE Alg. 2). A host stream (#moe.stream<host>) is a
// host thread running host planners: a resource of its own, charged the
// profile's measured solve times, started and joined by events like any
// other stream (docs/host-planners.md). Ranks run the same program on the
// same profile, so one rank's timeline is every rank's.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_SIMULATOR_H
#define MOE_ANALYSIS_SIMULATOR_H

#include "moe/Analysis/CostModel.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include <string>
#include <vector>

namespace mlir::moe {

struct SimulatedTask {
  /// The task op; null in an analytical timeline (FsmoeTimeline.h).
  Operation *op = nullptr;
  std::string label; // FlowMoE name, e.g. "D_2^1"
  int stream = 0;
  bool communication = false, lowPriority = false;
  /// A host planner's solve on a host stream: neither compute nor
  /// communication busy time.
  bool host = false;
  double startUs = 0, endUs = 0;
  TaskCost cost;
};

struct SimulationResult {
  std::vector<std::string> streamNames;
  std::vector<SimulatedTask> tasks;
  double iterationUs = 0;
  double computeBusyUs = 0, commBusyUs = 0;
  /// Host planners' solves (host streams), e.g. NetMoE's placement.
  double hostBusyUs = 0;
  /// The two communication resources (FSMoE §4): collectives whose group
  /// spans nodes, and those within a node. Together they are commBusyUs
  /// (less collectives over a single rank, which use no link).
  double interCommBusyUs = 0, intraCommBusyUs = 0;
  /// Time both link kinds carry a collective at once (FSMoE's
  /// inter/intra-node overlap).
  double linkOverlapUs = 0;
  /// Time both a compute and a communication stream are busy.
  double overlapUs = 0;
  /// Communication time not hidden behind computation.
  double exposedCommUs = 0;
  /// The busiest stream's busy time -- max(total compute, total
  /// communication) with one stream of each: no schedule beats it.
  double lowerBoundUs = 0;
  /// Peak bytes of replicated gradients computed but not yet all-reduced
  /// (FlowMoE Table 6's memory effect).
  double peakPendingGradientBytes = 0;
};

/// Fills the summary fields of `result` (iteration time, busy times,
/// overlap, exposed communication, lower bound) from its tasks, and names
/// its streams' tracks from `streamNames` (see chromeTrace). Shared by the
/// IR simulator and the analytical timelines (FsmoeTimeline.h).
void summarizeTimeline(SimulationResult &result,
                       llvm::ArrayRef<std::string> streamNames,
                       const std::vector<bool> &isCommStream);

/// Simulates `func`, a scheduled step (every task on a stream). Fails with
/// an error on the op that cannot be costed or when no task can progress.
FailureOr<SimulationResult> simulate(FunctionOpInterface func,
                                     CostModel &model);

/// Chrome-trace / Perfetto JSON: one process per rank, one track per stream
/// (a host stream's track holds its planners' solves, category "host").
/// When a step has several communication streams, each one's track name
/// says which links its collectives use, e.g. "comm1 (intra-node)".
std::string chromeTrace(const SimulationResult &result, int64_t ranks,
                        llvm::StringRef name);

} // namespace mlir::moe

#endif // MOE_ANALYSIS_SIMULATOR_H
