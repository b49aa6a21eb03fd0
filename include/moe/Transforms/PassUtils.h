//===- PassUtils.h - what the moe passes share ------------------*- C++ -*-===//
#ifndef MOE_TRANSFORMS_PASSUTILS_H
#define MOE_TRANSFORMS_PASSUTILS_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "moe/Analysis/HardwareProfile.h"

#include "llvm/Support/ToolOutputFile.h"

#include <memory>

namespace mlir::moe {

/// The functions of `module` that carry `attrName` — models (`moe.model`)
/// or scheduled steps (`moe.schedule`). When there is none, emits
/// "<pass>: <missing>" at the module and fails, so every pass reports an
/// input it has nothing to do with the same way.
FailureOr<SmallVector<FunctionOpInterface>> functionsWith(ModuleOp module,
                                                          StringRef attrName,
                                                          StringRef pass,
                                                          StringRef missing);

/// Sets `func`'s type to its entry block's argument types (results kept):
/// what a pass that retyped the arguments in place (a weight become its
/// shard) does last, so the signature and the block agree again.
void refreshArgumentTypes(FunctionOpInterface func);

/// The hardware profile a pass's `profile=` option names (a preset or a
/// JSON file). Emits "<pass>: needs profile=<preset or JSON file>; presets:
/// ..." when it is empty, or "<pass>: <why>" when it does not load, at the
/// module, and fails: every pass that prices a step asks the same way.
FailureOr<HardwareProfile> loadPassProfile(ModuleOp module, StringRef pass,
                                           StringRef profile);

/// Opens the file a pass writes its report to ("-": stdout); null after
/// emitting "<pass>: <why>" at the module. The caller keep()s it once the
/// report is complete, so a failed pass leaves no partial file.
std::unique_ptr<llvm::ToolOutputFile>
openPassOutput(ModuleOp module, StringRef pass, StringRef path);

/// `type` (a ranked tensor) with dimension `dim` set to `size`: how passes
/// retype token tensors (micro-batches) and expert slots (capacities).
RankedTensorType withDim(Type type, unsigned dim, int64_t size);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_PASSUTILS_H
