//===- MoeAttrs.h - moe dialect attributes and enums ------------*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_MOEATTRS_H
#define MOE_DIALECT_MOE_MOEATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"

#include "moe/Dialect/Moe/MoeEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "moe/Dialect/Moe/MoeAttrs.h.inc"

#endif // MOE_DIALECT_MOE_MOEATTRS_H
