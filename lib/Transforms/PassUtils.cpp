//===- PassUtils.cpp - what the moe passes share --------------------------===//

#include "moe/Transforms/PassUtils.h"

#include "mlir/Support/FileUtilities.h"

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

FailureOr<mlir::moe::HardwareProfile>
mlir::moe::loadPassProfile(ModuleOp module, StringRef pass,
                           StringRef profile) {
  llvm::Expected<HardwareProfile> hw =
      HardwareProfile::loadOption("profile=", profile);
  if (!hw)
    return mlir::emitError(module.getLoc())
           << pass << ": " << llvm::toString(hw.takeError());
  return std::move(*hw);
}

std::unique_ptr<llvm::ToolOutputFile>
mlir::moe::openPassOutput(ModuleOp module, StringRef pass, StringRef path) {
  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> file = openOutputFile(path, &error);
  if (!file)
    mlir::emitError(module.getLoc()) << pass << ": " << error;
  return file;
}

RankedTensorType mlir::moe::withDim(Type type, unsigned dim, int64_t size) {
  auto tensor = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(tensor.getShape());
  shape[dim] = size;
  return tensor.clone(shape);
}

void mlir::moe::refreshArgumentTypes(FunctionOpInterface func) {
  SmallVector<Type> inputs;
  for (BlockArgument a : func.getFunctionBody().front().getArguments())
    inputs.push_back(a.getType());
  func.setType(
      FunctionType::get(func->getContext(), inputs, func.getResultTypes()));
}
