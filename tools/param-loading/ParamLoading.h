//===- ParamLoading.h - step arguments' first values ------------*- C++ -*-===//
//
// How moe-run starts a step's arguments, as a function of (step, rank)
// only, so that moe-run (one rank, in its MPI job) and moe-export-params
// (every rank of the grid, at build time, without MPI) compute the same
// values: parameters with a `moe.source` start from the ONNX file's
// weights (each rank its own experts), the others, and all of them with
// --random-weights, are drawn from the seed; token ids and labels are
// drawn from the seed per rank.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TOOLS_PARAMLOADING_H
#define MOE_TOOLS_PARAMLOADING_H

#include "WeightLoader.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/Support/Error.h"
#include "moe_rt/expert_placement.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mlir::moe::run {

/// One argument's values: `f` for float tensors, `i` for integer ones
/// (token ids, labels), row-major in `shape`.
struct InitialValues {
  std::vector<int64_t> shape;
  std::vector<float> f;
  std::vector<int64_t> i;
  bool isInt = false;
  /// True when the values came from the parameter's moe.source.
  bool fromSource = false;
};

/// A scheduled step read from a file: the module and its function marked
/// by moe-flowmoe-pipeline (the last one, as moe-run runs it).
struct LoadedStep {
  OwningOpRef<ModuleOp> module;
  FunctionOpInterface func;
};

/// Registers the dialects a scheduled step uses with `context`, parses
/// `path` and finds the step. Errors: "cannot parse 'PATH'" (the parser's
/// diagnostics are printed first) and "'PATH' has no scheduled step (run
/// moe-opt --moe-flowmoe-pipeline)".
llvm::Expected<LoadedStep> loadScheduledStep(llvm::StringRef path,
                                             MLIRContext &context);

/// loadScheduledStep for a tool's main: an error goes to `die`, the tool's
/// own "TOOL: error: MESSAGE" printer, which does not return.
LoadedStep loadScheduledStepOrDie(llvm::StringRef path, MLIRContext &context,
                                  void (*die)(const std::string &));

/// This rank's index in its expert-parallel group (the model's ep_axes of
/// its grid, row-major), which decides the experts it holds. 0 without a
/// model attribute or grid.
int64_t expertGroupIndex(FunctionOpInterface func, int rank);

/// The number of ranks of the step's model grid (the product of its
/// shape), or 0 when the step names none.
int64_t gridSize(FunctionOpInterface func);

/// The name of argument `arg`: its moe.param (moe.state, moe.step_input),
/// else "arg<N>" (as moe-run's dumps and the generated step's tables name
/// token ids and labels): moe/Target/StepState.h.
std::string argumentName(FunctionOpInterface func, BlockArgument arg);

/// True when `arg` is a parameter (has a moe.param name).
bool isParameter(FunctionOpInterface func, BlockArgument arg);

/// The step's placed blocks (its `expert_slots.<block>` inputs): block ->
/// G, E. Empty when the step has none.
std::map<int64_t, moe_rt::expert_placement::BlockShape>
placementShapes(FunctionOpInterface step);

/// Applies `map` to `placement`: one expert -> rank list for every block
/// ("1,0,1,0"), or "BLOCK=RANKS" specs (';' or new lines between them),
/// or @FILE holding either (moe_rt/expert_placement.h's applySpec).
/// Errors name the block and entry, or the pipeline option when the step
/// has no expert placement input.
llvm::Error applyExpertPlacement(FunctionOpInterface step,
                                 const std::string &map,
                                 moe_rt::expert_placement::Placement &placement);

/// The initial values of step argument `arg` on `rank`. `sources` reads
/// moe.source weights; null means --random-weights (all from the seed).
/// `placement` (each block's G x S slot table, moe_rt/expert_placement.h;
/// a block without one: expert parallelism's layout) is the expert
/// placement: slot s of block b's expert weight then holds the values the
/// plain step gives expert placement[b][g S + s], g this rank's
/// expert-parallel index, so both steps start from the same model. Fails with a message naming the
/// parameter when its shape is dynamic or its source cannot be read.
llvm::Expected<InitialValues>
initialValues(FunctionOpInterface func, BlockArgument arg, int rank,
              uint64_t seed, frontend::WeightLoader *sources,
              const moe_rt::expert_placement::Placement &placement = {});

} // namespace mlir::moe::run

#endif // MOE_TOOLS_PARAMLOADING_H
