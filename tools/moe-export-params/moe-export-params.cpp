//===- moe-export-params.cpp - a step's initial parameters for every rank -===//
//
// Writes the initial parameters of every rank of a scheduled step's grid
// into one parameter file (runtime/include/moe_rt/params_file.h), the
// values moe-run would start from on each rank: imported parameters from
// their moe.source (the ONNX file's weights, each rank its own experts),
// the others from the seed. moe_compile_model runs it at build time so that
// a trainer linking the generated step starts from the model's weights
// with moe_step_load_params, without running moe-run (docs/codegen.md).
// No MPI: the ranks are looped over here.
//
//   moe-export-params STEP.mlir -o FILE [--world-size P] [--seed S]
//                     [--random-weights] [--expert-placement [BLOCK=]RANKS|@FILE]
//
// --expert-placement is moe-run's: the expert weights in that placement's
// slots (a step scheduled with expert-placement=1).
//
//===----------------------------------------------------------------------===//

#include "ParamLoading.h"

#include "moe/Dialect/Moe/MoeOps.h"
#include "WeightLoader.h"
#include "moe_rt/command_line.h"
#include "moe_rt/params_file.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace mlir;
using namespace mlir::moe;

namespace {

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "moe-export-params: error: %s\n", message.c_str());
  std::exit(2);
}

const char *kUsage =
    "usage: moe-export-params STEP.mlir -o FILE [--world-size P] [--seed S] "
    "[--random-weights] [--expert-placement [BLOCK=]RANKS|@FILE]\n";

struct Options {
  std::string input, output, placement;
  uint64_t worldSize = 0, seed = 1;
  bool randomWeights = false;
};

Options parseOptions(int argc, char **argv) {
  Options o;
  moe_rt::options::CommandLine args(argc, argv);
  while (args.next()) {
    if (args.flag("-h") || args.flag("--help")) {
      std::printf("%s", kUsage);
      std::exit(0);
    }
    if (args.flag("--random-weights"))
      o.randomWeights = true;
    else if (!args.text("-o", o.output) &&
             !args.whole("--world-size", o.worldSize) &&
             !args.whole("--seed", o.seed) &&
             !args.text("--expert-placement", o.placement) &&
             !args.positional(o.input, "input"))
      args.unknown();
  }
  if (!args.error().empty())
    die(args.error() + "\n" + kUsage);
  if (o.input.empty() || o.output.empty())
    die(std::string("needs a step and -o FILE\n") + kUsage);
  return o;
}

/// The number of ranks to write: the grid's (the generated step refuses
/// any other); --world-size is for a step without one, or a check.
int64_t worldOf(FunctionOpInterface step, uint64_t worldSize) {
  int64_t grid = run::gridSize(step);
  if (grid && worldSize && uint64_t(grid) != worldSize)
    die("--world-size " + std::to_string(worldSize) +
        " but the step's grid has " + std::to_string(grid) + " ranks");
  int64_t world = grid ? grid : int64_t(worldSize);
  if (world < 1)
    die("the step names no grid; give --world-size");
  return world;
}

/// --expert-placement's slot tables (every placed block's); empty without
/// one.
moe_rt::expert_placement::Placement slotsOf(FunctionOpInterface step,
                                            const std::string &placement) {
  moe_rt::expert_placement::Placement slots;
  if (!placement.empty())
    if (llvm::Error e = run::applyExpertPlacement(step, placement, slots))
      die("--expert-placement: " + llvm::toString(std::move(e)));
  return slots;
}

/// Every rank's parameters into `f` (the header written); returns how
/// many of rank 0's came from their moe.source, or the error.
llvm::Expected<int> writeRanks(std::FILE *f, FunctionOpInterface step,
                               int64_t world,
                               const moe_rt::expert_placement::Placement &slots,
                               const Options &o) {
  frontend::WeightLoader weights;
  // As moe-run: relative moe.source files are also looked up next to the
  // step's IR.
  StringRef dir = llvm::sys::path::parent_path(o.input);
  weights.setFallbackDirectory(dir.empty() ? "." : dir);
  int fromSource = 0;
  for (int64_t rank = 0; rank < world; ++rank) {
    moe_rt::params_file::writeRank(f, static_cast<int>(rank));
    for (BlockArgument arg : step.getFunctionBody().front().getArguments()) {
      if (!run::isParameter(step, arg))
        continue;
      auto values =
          run::initialValues(step, arg, static_cast<int>(rank), o.seed,
                             o.randomWeights ? nullptr : &weights, slots);
      if (!values)
        return values.takeError();
      if (values->isInt)
        return llvm::createStringError(
            "parameter '" + run::argumentName(step, arg) +
            "' is an integer tensor; parameter files hold float32 values");
      moe_rt::params_file::writeTensor(f, run::argumentName(step, arg),
                                       values->shape, values->f.data());
      fromSource += rank == 0 && values->fromSource;
    }
  }
  return fromSource;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parseOptions(argc, argv);

  MLIRContext context;
  run::LoadedStep loaded = run::loadScheduledStepOrDie(o.input, context, die);
  FunctionOpInterface step = loaded.func;
  int64_t world = worldOf(step, o.worldSize);
  moe_rt::expert_placement::Placement slots = slotsOf(step, o.placement);
  int parameters = 0;
  for (BlockArgument arg : step.getFunctionBody().front().getArguments())
    parameters += run::isParameter(step, arg);

  // Written to a temporary and renamed: a failed export leaves no file for
  // a later build step to take as complete.
  std::string tmp = o.output + ".tmp";
  std::FILE *f = std::fopen(tmp.c_str(), "w");
  if (!f)
    die("cannot write '" + tmp + "'");
  moe_rt::params_file::writeHeader(f, static_cast<int>(world), parameters);
  llvm::Expected<int> fromSource = writeRanks(f, step, world, slots, o);
  if (!fromSource) {
    std::fclose(f);
    std::remove(tmp.c_str());
    die(llvm::toString(fromSource.takeError()));
  }
  bool ok = !std::ferror(f);
  ok &= std::fclose(f) == 0;
  if (!ok) {
    std::remove(tmp.c_str());
    die("writing '" + tmp + "' failed");
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, o.output))
    die("cannot write '" + o.output + "': " + ec.message());
  std::fprintf(stderr,
               "moe-export-params: %d parameters x %lld ranks (%d from their "
               "ONNX source) -> %s\n",
               parameters, static_cast<long long>(world), *fromSource,
               o.output.c_str());
  return 0;
}
