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
/// arguments of moe.expert) of each block whose table differs between
/// `from` and `to`, each with the runtime's moe_step_move_experts
/// (moe_rt/step_support.h: one exact all-reduce per tensor over the world,
/// one data-parallel replica contributing). `world` is that communicator,
/// `sync` a stream.
llvm::Error migrateExperts(target::Interpreter &run,
                           const moe_rt::expert_placement::Placement &from,
                           const moe_rt::expert_placement::Placement &to,
                           moe_rt_stream sync, moe_rt_comm world);

} // namespace mlir::moe::run

#endif // MOE_TOOLS_MOERUN_EXPERTPLACEMENT_H
