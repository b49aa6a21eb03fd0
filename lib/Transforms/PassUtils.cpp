//===- PassUtils.cpp - what the moe passes share --------------------------===//

#include "moe/Transforms/PassUtils.h"

using namespace mlir;

FailureOr<SmallVector<FunctionOpInterface>>
mlir::moe::functionsWith(ModuleOp module, StringRef attrName, StringRef pass,
                         StringRef missing) {
  SmallVector<FunctionOpInterface> found;
  for (auto func : module.getOps<FunctionOpInterface>())
    if (func->hasAttr(attrName))
      found.push_back(func);
  if (found.empty())
    return mlir::emitError(module.getLoc()) << pass << ": " << missing;
  return found;
}

RankedTensorType mlir::moe::withDim(Type type, unsigned dim, int64_t size) {
  auto tensor = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(tensor.getShape());
  shape[dim] = size;
  return tensor.clone(shape);
}
