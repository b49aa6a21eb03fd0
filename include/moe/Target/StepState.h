//===- StepState.h - what a step carries and what the host feeds -*- C++ -*-===//
//
// A training step's arguments play four roles: inputs (token ids, labels),
// parameters (`moe.param`), optimizer state (`moe.state`) and step inputs
// (`moe.step_input`: the learning rate and the update count). Parameters
// and state are *carried*: the step returns their new values after the
// loss — the parameters in argument order, then the state in argument
// order — and the next step starts from them. Step inputs are written by
// the host before each step (the learning rate from `moe.lr_schedule`).
// moe-run's interpreter and the EmitC conversion read the roles here.
// docs/optimizers.md.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TARGET_STEPSTATE_H
#define MOE_TARGET_STEPSTATE_H

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/Support/Error.h"

#include "moe_rt/checkpoint_file.h"
#include "moe_rt/lr_schedule.h"

#include <string>

namespace mlir::moe::target {

enum class ArgRole { input, param, state, stepInput };

ArgRole roleOf(FunctionOpInterface step, BlockArgument arg);

/// The moe.param, moe.state or moe.step_input string of `arg`, else
/// "arg<N>".
std::string argumentName(FunctionOpInterface step, BlockArgument arg);

/// The carried arguments in the order of the results after the loss.
SmallVector<BlockArgument> carriedArguments(FunctionOpInterface step);

/// Whether a parameter, or the optimizer state of one, is an expert
/// weight: split over the expert-parallel group (dimension 0) rather than
/// replicated.
bool isExpertArgument(FunctionOpInterface step, BlockArgument arg);

/// The MoE block (moe.task's block of its moe.expert) of an expert weight
/// or its optimizer state: whose expert placement lays it out. -1 for
/// another argument, or one whose moe.expert carries no block.
int64_t expertBlock(FunctionOpInterface step, BlockArgument arg);

/// The checkpoint manifest of `step` on its model grid at `counters`: the
/// grid, the carried tensors' layout and their fingerprint (moe-run writes
/// it; generated steps get it from moe-convert-to-emitc).
moe_rt::checkpoint::Manifest
checkpointManifest(FunctionOpInterface step,
                   moe_rt::checkpoint::Counters counters = {});

/// The step's learning-rate schedule (moe.lr_schedule); an error names
/// the field at fault. A step without one has no "lr" input.
llvm::Expected<moe_rt_lr_schedule> lrSchedule(FunctionOpInterface step);

} // namespace mlir::moe::target

#endif // MOE_TARGET_STEPSTATE_H
