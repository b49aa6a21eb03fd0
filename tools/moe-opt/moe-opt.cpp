//===- moe-opt.cpp - the moe compiler driver ------------------------------===//
//
// mlir-opt for the moe dialect: the upstream MlirOptMain driver with the
// dialects a moe model is written in, the moe passes and the upstream
// transformation passes (canonicalize, cse, inline, ...).
//
//===----------------------------------------------------------------------===//

#include "moe/Conversion/Passes.h"
#include "moe/Dialect/Moe/MoeDialect.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/Extensions/InlinerExtension.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::moe::MoeDialect, mlir::arith::ArithDialect,
                  mlir::func::FuncDialect, mlir::shard::ShardDialect,
                  mlir::tensor::TensorDialect>();
  mlir::func::registerInlinerExtension(registry);

  mlir::registerTransformsPasses();
  mlir::moe::registerMoePasses();
  mlir::moe::registerMoePipelines();
  mlir::moe::registerMoeConversionPasses();

  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "moe-mlir optimizer: MoE training-step compiler\n",
      registry));
}
