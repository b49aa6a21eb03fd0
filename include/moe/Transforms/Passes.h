//===- Passes.h - moe passes ------------------------------------*- C++ -*-===//
#ifndef MOE_TRANSFORMS_PASSES_H
#define MOE_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace mlir::moe {

#define GEN_PASS_DECL
#include "moe/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moe/Transforms/Passes.h.inc"

/// Registers moe-flowmoe-pipeline.
void registerMoePipelines();

/// The transformations behind moe-chunk-gradients and moe-insert-syncs, for
/// passes that apply them to copies (moe-autotune).
LogicalResult chunkAllReduces(Operation *root, int64_t chunkBytes);
LogicalResult insertSyncs(FunctionOpInterface func);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_PASSES_H
