//===- moe-opt.cpp - the moe compiler driver ------------------------------===//
//
// mlir-opt for the moe dialect: the upstream MlirOptMain driver with the
// dialects a moe model is written in, the moe passes and the upstream
// transformation passes (canonicalize, cse, inline, ...).
//
// Two more inputs besides .mlir: an ONNX model (`moe-opt model.onnx`) and,
// with --import-hf-config, a Hugging Face config.json. Either is imported
// into a moe module first; that module then goes through the ordinary
// MlirOptMain pipeline (passes, -o, --mlir-print-ir-after-all, ...), so an
// imported model is treated exactly like a hand-written one.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeDialect.h"
#include "moe/Frontend/OnnxImport.h"
#include "moe/Target/EmitC/Passes.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/Extensions/InlinerExtension.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;
namespace frontend = mlir::moe::frontend;
namespace cl = llvm::cl;

// Registered at static initialisation, so the single
// cl::ParseCommandLineOptions inside registerAndParseCLIOptions parses them
// together with MlirOptMain's own options (and --help lists them).
static cl::OptionCategory frontendCategory(
    "moe frontend options (inputs ending in .onnx, --import-hf-config)");

static cl::opt<bool> importHfConfig(
    "import-hf-config",
    cl::desc("Treat the input as a Hugging Face config.json and import the "
             "model it describes (shape-only: no weights)"),
    cl::cat(frontendCategory));

static cl::opt<std::string> onnxGrid(
    "onnx-grid",
    cl::desc("Device grid NODESxGPUS the imported model is built for; "
             "experts are split over all NODES*GPUS ranks (default 1x1)"),
    cl::value_desc("NxG"), cl::init("1x1"), cl::cat(frontendCategory));

static cl::opt<int64_t>
    onnxBatch("onnx-batch",
              cl::desc("Samples per GPU B of the imported model (overrides the "
                       "model's; needed when its input batch is symbolic)"),
              cl::value_desc("B"), cl::cat(frontendCategory));

static cl::opt<int64_t>
    onnxSeq("onnx-seq",
            cl::desc("Tokens per sample N of the imported model (overrides the "
                     "model's; needed when its sequence length is symbolic)"),
            cl::value_desc("N"), cl::cat(frontendCategory));

static cl::opt<bool> onnxReport(
    "onnx-report",
    cl::desc("write, instead of the IR, which ONNX nodes each op of the "
             "imported model computes (per block)"),
    cl::init(false), cl::cat(frontendCategory));

static cl::opt<double> onnxCapacityFactor(
    "onnx-capacity-factor",
    cl::desc("Capacity factor f for imported MoE layers that do not fix "
             "one (otherwise they are imported as dropless or as their "
             "config says)"),
    cl::value_desc("f"), cl::cat(frontendCategory));

/// --onnx-* options as the importers take them; errors name the option.
static FailureOr<frontend::ImportOptions> importOptions() {
  frontend::ImportOptions options;
  std::string grid = StringRef(onnxGrid).lower();
  auto [nodes, gpus] = StringRef(grid).split('x');
  if (nodes.getAsInteger(10, options.nodes) ||
      gpus.getAsInteger(10, options.gpusPerNode) || options.nodes <= 0 ||
      options.gpusPerNode <= 0) {
    llvm::errs() << "moe-opt: --onnx-grid must be NODESxGPUS with positive "
                    "sizes (e.g. 2x8), got '"
                 << onnxGrid << "'\n";
    return failure();
  }
  if (onnxBatch.getNumOccurrences()) {
    if (onnxBatch <= 0) {
      llvm::errs() << "moe-opt: --onnx-batch must be positive, got "
                   << onnxBatch << "\n";
      return failure();
    }
    options.batch = onnxBatch;
  }
  if (onnxSeq.getNumOccurrences()) {
    if (onnxSeq <= 0) {
      llvm::errs() << "moe-opt: --onnx-seq must be positive, got " << onnxSeq
                   << "\n";
      return failure();
    }
    options.seq = onnxSeq;
  }
  if (onnxCapacityFactor.getNumOccurrences()) {
    if (!(onnxCapacityFactor > 0.0) || std::isinf(onnxCapacityFactor)) {
      llvm::errs() << "moe-opt: --onnx-capacity-factor must be a positive "
                      "number, got "
                   << onnxCapacityFactor << "\n";
      return failure();
    }
    options.capacityFactor = onnxCapacityFactor;
  }
  return options;
}

/// Imports `inputFilename` and runs the MlirOptMain pipeline on the result.
/// Nothing is written to `outputFilename` unless both succeed.
static LogicalResult importAndRun(llvm::StringRef inputFilename,
                                  llvm::StringRef outputFilename, bool isOnnx,
                                  DialectRegistry &registry) {
  MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();
  FailureOr<frontend::ImportOptions> options = importOptions();
  if (failed(options))
    return failure();
  if (inputFilename == "-") {
    llvm::errs() << "moe-opt: " << (isOnnx ? "ONNX" : "--import-hf-config")
                 << " import needs a file name, not stdin\n";
    return failure();
  }
  if (!llvm::sys::fs::exists(inputFilename)) {
    llvm::errs() << "moe-opt: cannot open '" << inputFilename
                 << "': no such file\n";
    return failure();
  }

  std::string text, origin, report;
  llvm::raw_string_ostream reportStream(report);
  if (onnxReport) {
    if (!isOnnx) {
      llvm::errs() << "moe-opt: --onnx-report needs an ONNX input\n";
      return failure();
    }
    options->report = &reportStream;
  }
  {
    MLIRContext context(registry);
    llvm::SourceMgr sourceMgr;
    SourceMgrDiagnosticHandler handler(sourceMgr, &context);
    OwningOpRef<ModuleOp> module =
        isOnnx
            ? frontend::importOnnxFile(inputFilename, *options, &context)
            : frontend::importHfConfigFile(inputFilename, *options, &context);
    if (!module)
      return failure();
    // The builder puts the model's origin on the module's location.
    if (auto name = dyn_cast<NameLoc>(module->getLoc()))
      origin = name.getName().str();
    // Debug info keeps the ONNX node / config locations through the
    // re-parse inside MlirOptMain.
    llvm::raw_string_ostream os(text);
    module->print(os, OpPrintingFlags().enableDebugInfo());
  }

  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> output =
      openOutputFile(outputFilename, &error);
  if (!output) {
    llvm::errs() << error << "\n";
    return failure();
  }
  if (onnxReport) {
    output->os() << report;
    output->keep();
    return success();
  }
  if (!origin.empty() && !config.shouldEmitBytecode())
    output->os() << "// " << origin << "\n";
  if (failed(
          MlirOptMain(output->os(),
                      llvm::MemoryBuffer::getMemBufferCopy(text, inputFilename),
                      registry, config)))
    return failure();
  output->keep();
  return success();
}

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::moe::MoeDialect, mlir::arith::ArithDialect,
                  mlir::func::FuncDialect, mlir::shard::ShardDialect,
                  mlir::tensor::TensorDialect>();
  mlir::func::registerInlinerExtension(registry);

  mlir::registerTransformsPasses();
  mlir::moe::registerMoePasses();
  mlir::moe::registerMoePipelines();
  mlir::moe::registerMoeEmitCPasses();

  auto [inputFilename, outputFilename] = registerAndParseCLIOptions(
      argc, argv, "moe-mlir optimizer: MoE training-step compiler\n", registry);
  bool isOnnx = StringRef(inputFilename).ends_with_insensitive(".onnx");
  if (!isOnnx && !importHfConfig)
    return asMainReturnCode(
        MlirOptMain(argc, argv, inputFilename, outputFilename, registry));

  llvm::InitLLVM initLLVM(argc, argv);
  return asMainReturnCode(
      importAndRun(inputFilename, outputFilename, isOnnx, registry));
}
