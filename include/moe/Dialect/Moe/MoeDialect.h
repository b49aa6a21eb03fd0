//===- MoeDialect.h - the moe dialect ---------------------------*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_MOEDIALECT_H
#define MOE_DIALECT_MOE_MOEDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Dialect.h"

#include "moe/Dialect/Moe/MoeDialect.h.inc"

#endif // MOE_DIALECT_MOE_MOEDIALECT_H
