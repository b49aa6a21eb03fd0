//===- OnnxImport.h - ONNX model -> moe IR ----------------------*- C++ -*-===//
//
// `moe-opt model.onnx` and `moe-opt --import-hf-config config.json` go
// through these. Errors are MLIR diagnostics at the ONNX node's location
// (NameLoc(node name) inside FileLineColLoc(file, 0, 0)), emitted on the
// context, and the functions return null; no partial output is written.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_FRONTEND_ONNXIMPORT_H
#define MOE_FRONTEND_ONNXIMPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>

namespace mlir::moe::frontend {

struct ImportOptions {
  /// Device grid the step is built for (nodes x GPUs per node).
  int64_t nodes = 1, gpusPerNode = 1;
  /// Per-GPU batch B and sequence length N when the graph's inputs have
  /// symbolic (dynamic) dimensions, or to override the exported ones.
  std::optional<int64_t> batch, seq;
  /// Capacity factor for patterns that do not fix one (dropless ones).
  std::optional<double> capacityFactor;
  /// When set, importOnnxFile writes which ONNX nodes each op of the
  /// imported model computes (moe-opt --onnx-report).
  llvm::raw_ostream *report = nullptr;
};

/// Imports an ONNX file. Weights stay in the file (moe.source attributes);
/// a model whose external data is absent imports shape-only.
OwningOpRef<ModuleOp> importOnnxFile(llvm::StringRef path,
                                     const ImportOptions &options,
                                     MLIRContext *ctx);

/// Imports an ONNX model held in memory (the fuzzer's entry point); `name`
/// stands for the file in diagnostics and anchors relative external-data
/// locations.
OwningOpRef<ModuleOp> importOnnxBuffer(llvm::StringRef bytes,
                                       llvm::StringRef name,
                                       const ImportOptions &options,
                                       MLIRContext *ctx);

/// Builds a shape-only model from a Hugging Face config.json (Mixtral,
/// Qwen2-MoE, DeepSeek-V2/V3, Switch fields).
OwningOpRef<ModuleOp> importHfConfigFile(llvm::StringRef path,
                                         const ImportOptions &options,
                                         MLIRContext *ctx);

} // namespace mlir::moe::frontend

#endif // MOE_FRONTEND_ONNXIMPORT_H
