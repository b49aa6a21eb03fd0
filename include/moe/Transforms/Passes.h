//===- Passes.h - moe passes ------------------------------------*- C++ -*-===//
#ifndef MOE_TRANSFORMS_PASSES_H
#define MOE_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace mlir::moe {

#define GEN_PASS_DECL
#include "moe/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moe/Transforms/Passes.h.inc"

/// Registers moe-flowmoe-pipeline.
void registerMoePipelines();

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_PASSES_H
