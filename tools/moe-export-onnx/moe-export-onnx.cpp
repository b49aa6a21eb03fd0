//===- moe-export-onnx.cpp - a checkpoint's parameters as ONNX initializers -===//
//
// Closes the training loop for imported models: the trained parameters of
// a checkpoint (docs/checkpoint-format.md), gathered from every rank's file
// (each rank's experts, as the manifest lays them out), are written back
// into the initializers of the ONNX model the step was imported from,
// undoing the import's layout changes (InitializerWriter.h), so that ONNX
// Runtime or PyTorch (a state_dict from the initializers) run the trained
// model. Everything else in the file is kept. No MPI: it reads every
// rank's file itself.
//
//   moe-export-onnx STEP.mlir --checkpoint DIR -o TRAINED.onnx
//                   [--onnx MODEL.onnx]
//
// docs/tools/moe-export-onnx.md.
//
//===----------------------------------------------------------------------===//

#include "InitializerWriter.h"
#include "ParamLoading.h"
#include "WeightLoader.h"

#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Target/StepState.h"
#include "moe_rt/checkpoint_file.h"
#include "moe_rt/command_line.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace mlir;
using namespace mlir::moe;
namespace ckpt = moe_rt::checkpoint;

namespace {

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "moe-export-onnx: error: %s\n", message.c_str());
  std::exit(2);
}

const char *kUsage = "usage: moe-export-onnx STEP.mlir --checkpoint DIR -o "
                     "TRAINED.onnx [--onnx MODEL.onnx]\n";

struct Options {
  std::string step, checkpoint, output, onnx;
};

Options parseOptions(int argc, char **argv) {
  Options o;
  moe_rt::options::CommandLine args(argc, argv);
  while (args.next()) {
    if (args.flag("-h") || args.flag("--help")) {
      std::printf("%s", kUsage);
      std::exit(0);
    }
    if (!args.text("-o", o.output) &&
        !args.text("--checkpoint", o.checkpoint) &&
        !args.text("--onnx", o.onnx) && !args.positional(o.step, "step"))
      args.unknown();
  }
  if (!args.error().empty())
    die(args.error() + "\n" + kUsage);
  if (o.step.empty() || o.checkpoint.empty() || o.output.empty())
    die(std::string("needs a step, --checkpoint DIR and -o FILE\n") + kUsage);
  return o;
}

/// A parameter of the step with its source and its whole-model shape.
struct Parameter {
  std::string name;
  SourceAttr source;
  std::vector<int64_t> shape;
};

/// Every parameter of the step, each with a moe.source naming one file;
/// the file (`--onnx` overrides it). A parameter without a source is an
/// error: the step was not imported from ONNX.
std::vector<Parameter> parameters(FunctionOpInterface step,
                                  const ckpt::Manifest &whole,
                                  std::string &file) {
  std::vector<Parameter> out;
  for (BlockArgument arg : target::carriedArguments(step)) {
    if (target::roleOf(step, arg) != target::ArgRole::param)
      continue;
    std::string name = target::argumentName(step, arg);
    auto source = step.getArgAttrOfType<SourceAttr>(
        arg.getArgNumber(), MoeDialect::getSourceAttrName());
    if (!source)
      die("parameter '" + name +
          "' has no moe.source: the step was not imported from an ONNX "
          "file (built from an HF config or gen_model_mlir?), so there is "
          "no initializer to write it to; its trained values are in the "
          "checkpoint (docs/checkpoint-format.md)");
    std::string from = source.getFile().getValue().str();
    if (file.empty())
      file = from;
    else if (from != file)
      die("parameters come from two ONNX files ('" + file + "', and '" +
          from + "' for '" + name + "'); export writes one");
    const ckpt::LayoutEntry *e = nullptr;
    for (const ckpt::LayoutEntry &t : whole.tensors)
      if (t.name == name)
        e = &t;
    out.push_back({name, source, e->localShape});
  }
  return out;
}

/// The source file as moe-run finds it: from the working directory, else
/// next to the step's IR.
std::string locate(const std::string &file, const std::string &stepPath) {
  if (llvm::sys::path::is_absolute(file) || llvm::sys::fs::exists(file))
    return file;
  llvm::SmallString<256> next(llvm::sys::path::parent_path(stepPath));
  llvm::sys::path::append(next, file);
  return llvm::sys::fs::exists(next) ? std::string(next) : file;
}

/// Reads every parameter back from the written file with the loader the
/// runtime uses (WeightLoader) and checks it gives the checkpoint's
/// values (bit for bit for float32 initializers without a scale, else
/// within the rounding of a 16-bit initializer type). A safety net for
/// the inverse of each layout change; returns the first difference.
std::string checkRoundTrip(const std::vector<Parameter> &params,
                           const ckpt::RankState &state,
                           const std::string &written, MLIRContext &context) {
  frontend::WeightLoader loader;
  StringAttr file = StringAttr::get(&context, written);
  for (size_t k = 0; k < params.size(); ++k) {
    const Parameter &p = params[k];
    SourceAttr s = p.source;
    SourceAttr again =
        SourceAttr::get(&context, file, s.getNames(), s.getScale(),
                        s.getSlice(), s.getStacked(), s.getTranspose());
    auto values = loader.load(again, p.shape);
    if (!values)
      return "reading the written file back: parameter '" + p.name + "': " +
             llvm::toString(values.takeError());
    const std::vector<float> &want = state.tensors[k].values;
    for (size_t i = 0; i < want.size(); ++i) {
      float a = (*values)[i], b = want[i];
      // float16 has 11 significant bits, bfloat16 8: 2^-8 relative covers
      // both; float32 with a scale, one rounding each way.
      float tol = std::fabs(b) * 4e-3f;
      if (std::memcmp(&a, &b, 4) != 0 && !(std::fabs(a - b) <= tol))
        return "reading the written file back: parameter '" + p.name +
               "' value " + std::to_string(i) + " is " + std::to_string(a) +
               ", the checkpoint's " + std::to_string(b);
    }
  }
  return "";
}

} // namespace

int main(int argc, char **argv) {
  Options o = parseOptions(argc, argv);

  MLIRContext context;
  run::LoadedStep loaded = run::loadScheduledStepOrDie(o.step, context, die);
  FunctionOpInterface step = loaded.func;

  // Every parameter needs a source; then the whole model (every expert)
  // from every rank's file, checked against the step's layout, before
  // anything is written.
  ckpt::Manifest whole = ckpt::wholeModel(target::checkpointManifest(step));
  std::string file;
  std::vector<Parameter> params = parameters(step, whole, file);
  std::string dir, message;
  ckpt::RankState state;
  if (!ckpt::checkpointDir(o.checkpoint, dir, message) ||
      !ckpt::readReshardedAt(dir, whole, 0, state, message))
    die(message);
  std::string model = locate(o.onnx.empty() ? file : o.onnx, o.step);
  auto writer = frontend::InitializerWriter::open(model);
  if (!writer)
    die(llvm::toString(writer.takeError()));
  // Parameters come first in the manifest's order (the step's carried
  // order), so state.tensors[k] is params[k].
  for (size_t k = 0; k < params.size(); ++k)
    if (llvm::Error e = (*writer)->store(params[k].name, params[k].source,
                                         params[k].shape,
                                         state.tensors[k].values))
      die(llvm::toString(std::move(e)));
  auto bytes = (*writer)->serialize();
  if (!bytes)
    die(llvm::toString(bytes.takeError()));

  // Written to a temporary, read back and checked, then renamed: a failed
  // export leaves no file behind.
  std::string tmp = o.output + ".tmp";
  {
    std::FILE *f = std::fopen(tmp.c_str(), "wb");
    bool ok = f && std::fwrite(bytes->data(), 1, bytes->size(), f) ==
                       bytes->size();
    ok = f && std::fclose(f) == 0 && ok;
    if (!ok) {
      std::remove(tmp.c_str());
      die("cannot write '" + tmp + "'");
    }
  }
  std::string differs = checkRoundTrip(params, state, tmp, context);
  if (!differs.empty()) {
    std::remove(tmp.c_str());
    die(differs);
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, o.output)) {
    std::remove(tmp.c_str());
    die("cannot write '" + o.output + "': " + ec.message());
  }
  std::fprintf(stderr,
               "moe-export-onnx: %zu parameters of '%s' (step %llu) -> "
               "%zu initializers of '%s' -> %s\n",
               params.size(), dir.c_str(),
               (unsigned long long)state.counters.step, (*writer)->written(),
               model.c_str(), o.output.c_str());
  return 0;
}
