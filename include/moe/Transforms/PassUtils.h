//===- PassUtils.h - what the moe passes share ------------------*- C++ -*-===//
#ifndef MOE_TRANSFORMS_PASSUTILS_H
#define MOE_TRANSFORMS_PASSUTILS_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir::moe {

/// The functions of `module` that carry `attrName` — models (`moe.model`)
/// or scheduled steps (`moe.schedule`). When there is none, emits
/// "<pass>: <missing>" at the module and fails, so every pass reports an
/// input it has nothing to do with the same way.
FailureOr<SmallVector<FunctionOpInterface>> functionsWith(ModuleOp module,
                                                          StringRef attrName,
                                                          StringRef pass,
                                                          StringRef missing);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_PASSUTILS_H
