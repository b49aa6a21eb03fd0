//===- Checkpointing.h - moe-run's --checkpoint / --resume -------*- C++ -*-===//
//
// Saves a run's carried state (parameters, optimizer state: StepState.h)
// and counters to a checkpoint directory, and loads it back, in the format
// of moe_rt/checkpoint_file.h (docs/checkpoint-format.md). Every rank
// writes its own file; rank 0 commits the checkpoint once all have.
// Loading checks everything (grid, every tensor's name, role, layout and
// shape, checksums) before it overwrites anything.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TOOLS_MOERUN_CHECKPOINTING_H
#define MOE_TOOLS_MOERUN_CHECKPOINTING_H

#include "moe/Target/Interpreter.h"

#include "moe_rt/checkpoint_file.h"

#include "llvm/Support/Error.h"

#include <functional>
#include <string>

namespace mlir::moe::run {

/// Writes this rank's file of a checkpoint at `counters` under `root`;
/// `agree(ok)` must return whether every rank succeeded (a collective);
/// then rank 0 commits. Every rank returns the same success.
llvm::Error saveCheckpoint(target::Interpreter &run, const std::string &root,
                           moe_rt::checkpoint::Counters counters,
                           const std::function<bool(bool)> &agree);

/// Reads and checks the latest checkpoint under `root` for this step and
/// rank. Nothing is written. The state is in the checkpoint's expert
/// placement on its own grid, else resharded into `placement`
/// (RankState::placement says which).
llvm::Expected<moe_rt::checkpoint::RankState>
readCheckpoint(target::Interpreter &run, const std::string &root,
               const moe_rt::checkpoint::Placement &placement);

/// Copies a checked rank state into the run's carried arguments.
void restoreCheckpoint(target::Interpreter &run,
                       const moe_rt::checkpoint::RankState &state);

} // namespace mlir::moe::run

#endif // MOE_TOOLS_MOERUN_CHECKPOINTING_H
