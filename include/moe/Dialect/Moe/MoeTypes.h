//===- MoeTypes.h - moe dialect types ---------------------------*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_MOETYPES_H
#define MOE_DIALECT_MOE_MOETYPES_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Types.h"

#define GET_TYPEDEF_CLASSES
#include "moe/Dialect/Moe/MoeTypes.h.inc"

#endif // MOE_DIALECT_MOE_MOETYPES_H
