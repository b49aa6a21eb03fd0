//===- ScheduleVerifier.h - is a scheduled step safe to run? ----*- C++ -*-===//
#ifndef MOE_ANALYSIS_SCHEDULEVERIFIER_H
#define MOE_ANALYSIS_SCHEDULEVERIFIER_H

#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir::moe {

/// Checks a scheduled step (see the moe-verify-schedule pass): every task
/// on a stream, every cross-stream use waited for, every wait on an event
/// recorded before it, collectives of one group and class totally ordered,
/// and a host planner started after its inputs and joined before its
/// result is read (docs/host-planners.md).
/// Emits an error naming both ops involved and fails on the first problem.
/// The scheduling passes call it after themselves in debug builds.
LogicalResult verifySchedule(FunctionOpInterface func);

} // namespace mlir::moe

#endif // MOE_ANALYSIS_SCHEDULEVERIFIER_H
