//===- ExpertPlacement.h - moe-run's --expert-placement ----------*- C++
//-*-===//
//
// The expert placement of a step scheduled with expert-placement=1
// (docs/load-aware.md §2): the migration that moves every expert weight
// and its optimizer state when the map changes between steps
// (--expert-placement-at). The map itself: ParamLoading.h's
// expertSlotsOf.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TOOLS_MOERUN_EXPERTPLACEMENT_H
#define MOE_TOOLS_MOERUN_EXPERTPLACEMENT_H

#include "moe/Target/Interpreter.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::moe::run {

/// Moves every expert weight and its optimizer state (the carried
/// arguments of moe.expert) from slot table `from` to `to`: each rank
/// contributes its experts to one buffer per tensor, summed over the world
/// (one non-zero term per value: exact), and keeps the experts `to` gives
/// it. The expert-parallel group must be the whole world (no data-parallel
/// replicas of an expert); `world` is that communicator, `sync` a stream.
llvm::Error migrateExperts(target::Interpreter &run,
                           const std::vector<int64_t> &from,
                           const std::vector<int64_t> &to, int64_t groups,
                           moe_rt_stream sync, moe_rt_comm world);

} // namespace mlir::moe::run

#endif // MOE_TOOLS_MOERUN_EXPERTPLACEMENT_H
