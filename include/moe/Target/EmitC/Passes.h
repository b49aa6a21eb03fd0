//===- Passes.h - moe-convert-to-emitc -------------------------*- C++ -*-===//
#ifndef MOE_TARGET_EMITC_PASSES_H
#define MOE_TARGET_EMITC_PASSES_H

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::moe {

#define GEN_PASS_DECL
#include "moe/Target/EmitC/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moe/Target/EmitC/Passes.h.inc"

} // namespace mlir::moe

#endif // MOE_TARGET_EMITC_PASSES_H
