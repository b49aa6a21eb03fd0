//===- FuzzTarget.cpp - the ONNX importer under libFuzzer -----------------===//
//
// One input = one ONNX file's bytes. The importer must answer every input
// with either a module that verifies or an error diagnostic; a crash, an
// ASan report, an abort or a module that fails verification is a bug.
// Compiled into the libFuzzer binary (clang++-14 -fsanitize=fuzzer) and
// into the replay/mutation driver (Replay.cpp) built with the project's
// compiler.
//
//===----------------------------------------------------------------------===//

#include "FuzzTarget.h"

#include "moe/Dialect/Moe/MoeDialect.h"
#include "moe/Frontend/OnnxImport.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace mlir;

namespace {
MLIRContext &context() {
  // One context for all inputs (creating one per input would dominate the
  // run time); no threads so that a crash's stack is the importer's.
  static MLIRContext *ctx = [] {
    DialectRegistry registry;
    registry.insert<moe::MoeDialect, arith::ArithDialect, func::FuncDialect,
                    shard::ShardDialect, tensor::TensorDialect>();
    auto *c = new MLIRContext(registry, MLIRContext::Threading::DISABLED);
    c->loadAllAvailableDialects();
    return c;
  }();
  return *ctx;
}
} // namespace

int moeFuzzOneInput(const uint8_t *data, size_t size, bool verbose) {
  MLIRContext &ctx = context();
  size_t errors = 0;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error)
      ++errors;
    if (verbose)
      llvm::errs() << "  diag: " << d << "\n";
    return success();
  });
  moe::frontend::ImportOptions opts;
  // Dynamic dims in a mutated model would stop the import before the walk;
  // fixed B and N let the fuzzer reach the matchers.
  opts.batch = 2;
  opts.seq = 4;
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  OwningOpRef<ModuleOp> m =
      moe::frontend::importOnnxBuffer(bytes, "fuzz-input.onnx", opts, &ctx);
  if (m) {
    if (failed(verify(*m))) {
      llvm::errs() << "moe-onnx-fuzz: the importer returned a module that "
                      "does not verify\n";
      std::abort();
    }
    return 0;
  }
  if (errors == 0) {
    llvm::errs() << "moe-onnx-fuzz: the importer failed without an error "
                    "diagnostic\n";
    std::abort();
  }
  return 0;
}
