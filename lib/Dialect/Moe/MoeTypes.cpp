//===- MoeTypes.cpp - moe dialect types -----------------------------------===//

#include "moe/Dialect/Moe/MoeTypes.h"
#include "moe/Dialect/Moe/MoeDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::moe;

#define GET_TYPEDEF_CLASSES
#include "moe/Dialect/Moe/MoeTypes.cpp.inc"

void MoeDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "moe/Dialect/Moe/MoeTypes.cpp.inc"
      >();
}
