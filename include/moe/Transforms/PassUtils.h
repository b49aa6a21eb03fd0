//===- PassUtils.h - what the moe passes share ------------------*- C++ -*-===//
#ifndef MOE_TRANSFORMS_PASSUTILS_H
#define MOE_TRANSFORMS_PASSUTILS_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
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

/// `type` (a ranked tensor) with dimension `dim` set to `size`: how passes
/// retype token tensors (micro-batches) and expert slots (capacities).
RankedTensorType withDim(Type type, unsigned dim, int64_t size);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_PASSUTILS_H
