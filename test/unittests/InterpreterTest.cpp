//===- InterpreterTest.cpp - moe-run's engine on known answers ------------===//
//
// The interpreter (include/moe/Target/Interpreter.h) runs a small step —
// embedding, linear head, cross-entropy, their vjps and SGD — and its API
// gives every value's buffer after the step and, through the after-op
// hook, while it runs. With zero weights the logits are zero, so the loss
// is log(V) and the SGD update is known. Runs as one MPI rank (it calls
// the runtime, which needs MPI started): test/unittests/interpreter.test.
//
//===----------------------------------------------------------------------===//

#include "moe/Target/Interpreter.h"

#include "moe/Dialect/Moe/MoeOps.h"

#include "moe_rt/collectives.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::target;

namespace {

// 2 x 4 tokens of a 16-word vocabulary, embedding 8.
const char *kStep = R"mlir(
func.func @step(%ids: tensor<2x4xi64>, %labels: tensor<2x4xi64>,
                %table: tensor<16x8xf32> {moe.param = "embed.table"},
                %head: tensor<8x16xf32> {moe.param = "lm_head.weight"})
    -> (tensor<f32>, tensor<16x8xf32>, tensor<8x16xf32>) {
  %x = moe.embedding %ids, %table {moe.stream = #moe.stream<compute>} : (tensor<2x4xi64>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
  %logits = moe.linear %x, %head {moe.stream = #moe.stream<compute>} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %loss = moe.cross_entropy %logits, %labels {moe.stream = #moe.stream<compute>} : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %dlogits = moe.vjp (%a = %logits : tensor<2x4x16xf32>, %b = %labels : tensor<2x4xi64>) cotangents(%one : tensor<f32>) -> (tensor<2x4x16xf32>) attributes {moe.stream = #moe.stream<compute>} {
    %l = moe.cross_entropy %a, %b : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
    moe.yield %l : tensor<f32>
  }
  %dx, %dhead = moe.vjp (%a = %x : tensor<2x4x8xf32>, %b = %head : tensor<8x16xf32>) cotangents(%dlogits : tensor<2x4x16xf32>) -> (tensor<2x4x8xf32>, tensor<8x16xf32>) attributes {moe.stream = #moe.stream<compute>} {
    %y = moe.linear %a, %b : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
    moe.yield %y : tensor<2x4x16xf32>
  }
  %dtable = moe.vjp (%a = %ids : tensor<2x4xi64>, %b = %table : tensor<16x8xf32>) cotangents(%dx : tensor<2x4x8xf32>) -> (tensor<16x8xf32>) attributes {moe.stream = #moe.stream<compute>} {
    %y = moe.embedding %a, %b : (tensor<2x4xi64>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
    moe.yield %y : tensor<2x4x8xf32>
  }
  %table2 = moe.sgd %table, %dtable lr = 1.0 {moe.stream = #moe.stream<compute>} : tensor<16x8xf32>
  %head2 = moe.sgd %head, %dhead lr = 1.0 {moe.stream = #moe.stream<compute>} : tensor<8x16xf32>
  return %loss, %table2, %head2 : tensor<f32>, tensor<16x8xf32>, tensor<8x16xf32>
}
)mlir";

class InterpreterTest : public ::testing::Test {
protected:
  void SetUp() override {
    context.loadDialect<MoeDialect, arith::ArithDialect, func::FuncDialect,
                        shard::ShardDialect, tensor::TensorDialect>();
    module = parseSourceString<ModuleOp>(kStep, &context);
    ASSERT_TRUE(module);
    func = cast<func::FuncOp>(module->lookupSymbol("step"));
    run = std::make_unique<Interpreter>(func, Interpreter::Options{});
    ASSERT_FALSE(static_cast<bool>(run->prepare()));
    // Token ids and labels 0..7; the weights stay zero.
    Block &body = func.getBody().front();
    for (unsigned a : {0u, 1u}) {
      Buffer *b = run->buffer(body.getArgument(a));
      ASSERT_TRUE(b && b->isInt);
      for (size_t i = 0; i < b->i.size(); ++i)
        b->i[i] = int64_t(i);
    }
  }

  /// The `index`-th op of @step, in IR order.
  Operation *op(unsigned index) {
    return &*std::next(func.getBody().front().begin(), index);
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  func::FuncOp func;
  std::unique_ptr<Interpreter> run;
};

TEST_F(InterpreterTest, ValuesAfterAStep) {
  ASSERT_FALSE(static_cast<bool>(run->run(1)));
  // Zero logits: the loss is log(16).
  Buffer *loss = run->buffer(op(2)->getResult(0));
  ASSERT_TRUE(loss);
  EXPECT_NEAR(loss->f[0], std::log(16.0f), 1e-6);
  auto results = run->results();
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].first, "loss");
  EXPECT_EQ(results[1].first, "embed.table");
  EXPECT_EQ(results[0].second, loss);
  // dlogits = (softmax - onehot) / tokens = 1/16/8 off the label, minus 1/8
  // on it; the head's gradient is x^T dlogits = 0 (x is zero), so the head
  // stays zero, and so does the table (dx = dlogits · head^T = 0).
  Buffer *dlogits = run->buffer(op(4)->getResult(0));
  ASSERT_TRUE(dlogits);
  EXPECT_NEAR(dlogits->f[0], 1.0f / 16 / 8 - 1.0f / 8, 1e-7); // token 0, label 0
  EXPECT_NEAR(dlogits->f[1], 1.0f / 16 / 8, 1e-7);
  for (float v : results[2].second->f)
    EXPECT_EQ(v, 0.0f);
  // Events and values that are not tensors have no buffer.
  EXPECT_EQ(run->buffer(Value()), nullptr);
}

TEST_F(InterpreterTest, AfterOpHookSeesEachOpsValues) {
  std::vector<std::string> seen;
  float lossAtHook = -1;
  run->setAfterOp([&](Operation *o) -> llvm::Error {
    seen.push_back(o->getName().getStringRef().str());
    // The op's results are complete when the hook runs.
    if (isa<CrossEntropyOp>(o))
      lossAtHook = run->buffer(o->getResult(0))->f[0];
    for (Value r : o->getResults())
      if (!run->buffer(r))
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "a result without a buffer");
    return llvm::Error::success();
  });
  ASSERT_FALSE(static_cast<bool>(run->run(1)));
  EXPECT_NEAR(lossAtHook, std::log(16.0f), 1e-6);
  // Every op with a stream, in program order (the constant is filled on
  // the host and has no stream).
  std::vector<std::string> expected = {
      "moe.embedding", "moe.linear", "moe.cross_entropy", "moe.vjp",
      "moe.vjp",       "moe.vjp",    "moe.sgd",           "moe.sgd"};
  EXPECT_EQ(seen, expected);
}

TEST_F(InterpreterTest, AHookErrorStopsTheStep) {
  run->setAfterOp([](Operation *o) -> llvm::Error {
    if (isa<LinearOp>(o))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "stop at the linear");
    return llvm::Error::success();
  });
  llvm::Error e = run->run(1);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_EQ(llvm::toString(std::move(e)), "stop at the linear");
}

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (moe_rt_mpi_init(&argc, &argv) != MOE_RT_OK)
    return 2;
  int rc = RUN_ALL_TESTS();
  moe_rt_mpi_finalize();
  return rc;
}
