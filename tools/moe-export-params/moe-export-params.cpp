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
#include "moe_rt/option_values.h"
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

/// A non-negative integer option value, whole.
uint64_t number(const std::string &option, const std::string &text) {
  std::optional<uint64_t> v = moe_rt::options::wholeNumber(text);
  if (!v)
    die(option + " needs a non-negative integer, got '" + text + "'");
  return *v;
}

} // namespace

int main(int argc, char **argv) {
  std::string input, output, placement;
  int64_t worldSize = 0;
  uint64_t seed = 1;
  bool randomWeights = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die(a + " needs a value");
      return argv[++i];
    };
    if (a == "-o")
      output = value();
    else if (a == "--world-size")
      worldSize = static_cast<int64_t>(number(a, value()));
    else if (a == "--seed")
      seed = number(a, value());
    else if (a == "--expert-placement")
      placement = value();
    else if (a == "--random-weights")
      randomWeights = true;
    else if (a == "-h" || a == "--help") {
      std::printf("%s", kUsage);
      return 0;
    } else if (!a.empty() && a[0] == '-')
      die("unknown argument '" + a + "'\n" + kUsage);
    else if (!input.empty())
      die("more than one input ('" + input + "', '" + a + "')");
    else
      input = a;
  }
  if (input.empty() || output.empty())
    die(std::string("needs a step and -o FILE\n") + kUsage);

  MLIRContext context;
  llvm::Expected<run::LoadedStep> loaded =
      run::loadScheduledStep(input, context);
  if (!loaded)
    die(llvm::toString(loaded.takeError()));
  FunctionOpInterface step = loaded->func;

  // The grid fixes the number of ranks (the generated step refuses any
  // other); --world-size is for a step without one, or a check.
  int64_t grid = run::gridSize(step);
  if (grid && worldSize && grid != worldSize)
    die("--world-size " + std::to_string(worldSize) +
        " but the step's grid "
        "has " +
        std::to_string(grid) + " ranks");
  int64_t world = grid ? grid : worldSize;
  if (world < 1)
    die("the step names no grid; give --world-size");

  moe_rt::expert_placement::Placement slots;
  if (!placement.empty())
    if (llvm::Error e = run::applyExpertPlacement(step, placement, slots))
      die("--expert-placement: " + llvm::toString(std::move(e)));

  frontend::WeightLoader weights;
  // As moe-run: relative moe.source files are also looked up next to the
  // step's IR.
  StringRef dir = llvm::sys::path::parent_path(input);
  weights.setFallbackDirectory(dir.empty() ? "." : dir);

  Block &entry = step.getFunctionBody().front();
  int parameters = 0;
  for (BlockArgument arg : entry.getArguments())
    parameters += run::isParameter(step, arg);

  // Written to a temporary and renamed: a failed export leaves no file for
  // a later build step to take as complete.
  std::string tmp = output + ".tmp";
  std::FILE *f = std::fopen(tmp.c_str(), "w");
  if (!f)
    die("cannot write '" + tmp + "'");
  moe_rt::params_file::writeHeader(f, static_cast<int>(world), parameters);
  int fromSource = 0;
  for (int64_t rank = 0; rank < world; ++rank) {
    moe_rt::params_file::writeRank(f, static_cast<int>(rank));
    for (BlockArgument arg : entry.getArguments()) {
      if (!run::isParameter(step, arg))
        continue;
      auto values =
          run::initialValues(step, arg, static_cast<int>(rank), seed,
                             randomWeights ? nullptr : &weights, slots);
      if (!values) {
        std::fclose(f);
        std::remove(tmp.c_str());
        die(llvm::toString(values.takeError()));
      }
      if (values->isInt) {
        std::fclose(f);
        std::remove(tmp.c_str());
        die("parameter '" + run::argumentName(step, arg) +
            "' is an integer tensor; parameter files hold float32 values");
      }
      moe_rt::params_file::writeTensor(f, run::argumentName(step, arg),
                                       values->shape, values->f.data());
      fromSource += rank == 0 && values->fromSource;
    }
  }
  bool ok = !std::ferror(f);
  ok &= std::fclose(f) == 0;
  if (!ok) {
    std::remove(tmp.c_str());
    die("writing '" + tmp + "' failed");
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, output))
    die("cannot write '" + output + "': " + ec.message());
  std::fprintf(stderr,
               "moe-export-params: %d parameters x %lld ranks (%d from their "
               "ONNX source) -> %s\n",
               parameters, static_cast<long long>(world), fromSource,
               output.c_str());
  return 0;
}
