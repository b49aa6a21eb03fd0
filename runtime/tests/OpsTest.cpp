//===- OpsTest.cpp - the step's op calls (moe_rt/ops.h) on a CPU stream ---===//
//
// Each call against a known answer or against the kernel it wraps, and its
// argument checks: a bad operand is refused at the call, a bad value (an
// embedding id out of range) fails the stream with a message.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/ops.h"

#include "TestTensor.h"

#include "kernels/Expert.h"
#include "kernels/Routing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace {

using moe_rt_test::Tensor;

struct OpsTest : moe_rt_test::CpuStreamTest {};

using moe_rt_test::fillRandom;

TEST_F(OpsTest, LinearKnownAnswerAndGradient) {
  Tensor x({1, 2, 2}, {1, 2, 3, 4}), w({2, 3}, {1, 0, 1, 0, 1, 1}),
      b({3}, {10, 20, 30}), y({1, 2, 3});
  ASSERT_EQ(moe_rt_linear(s, &x, &w, &b, &y), MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  std::vector<float> want = {11, 22, 33, 13, 24, 37};
  for (int i = 0; i < 6; ++i)
    EXPECT_FLOAT_EQ(y.f()[i], want[i]) << i;

  // dy = 1: dx = rowsum(w), dw = column sums of x broadcast, db = 2.
  Tensor dy({1, 2, 3}, {1, 1, 1, 1, 1, 1}), dx({1, 2, 2}), dw({2, 3}), db({3});
  ASSERT_EQ(moe_rt_linear_grad(s, &x, &w, &dy, &dx, &dw, &db), MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  EXPECT_FLOAT_EQ(dx.f()[0], 2);
  EXPECT_FLOAT_EQ(dx.f()[1], 2);
  EXPECT_FLOAT_EQ(dw.f()[0], 4); // x[:,0] = 1 + 3
  EXPECT_FLOAT_EQ(dw.f()[3], 6); // x[:,1] = 2 + 4
  EXPECT_FLOAT_EQ(db.f()[2], 2);
}

TEST_F(OpsTest, LinearRefusesMismatchedShapes) {
  Tensor x({2, 3}), w({2, 3}), y({2, 3});
  EXPECT_EQ(moe_rt_linear(s, &x, &w, nullptr, &y), MOE_RT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_rt_last_error()).find("moe_rt_linear"),
            std::string::npos)
      << moe_rt_last_error();
  EXPECT_EQ(moe_rt_linear(s, &x, nullptr, nullptr, &y),
            MOE_RT_INVALID_ARGUMENT);
  Tensor wrongType({3, 3}, MOE_RT_I64);
  EXPECT_EQ(moe_rt_linear(s, &x, &wrongType, nullptr, &y),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(sync(), MOE_RT_OK); // nothing was queued
}

TEST_F(OpsTest, NullOperandsAreRefusedNotDereferenced) {
  // Every check that reads a shape must come after the NULL checks.
  Tensor t({2, 3}), ids({2}, MOE_RT_I64), scalar({});
  moe_rt_attention_attrs attrs{1, 1, 3, 1, 0, MOE_RT_NORM_LAYER, 1e-5};
  EXPECT_EQ(moe_rt_norm(s, MOE_RT_NORM_LAYER, 1e-5, nullptr, &t, nullptr, &t),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_norm_grad(s, MOE_RT_NORM_LAYER, 1e-5, nullptr, &t, &t, &t,
                             &t, &t, &t),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_norm_grad(s, MOE_RT_NORM_LAYER, 1e-5, &t, &t, nullptr, &t,
                             nullptr, &t, &t),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_linear_grad(s, nullptr, &t, &t, &t, &t, nullptr),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_cross_entropy(s, nullptr, &ids, &scalar),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_cross_entropy_grad(s, &t, nullptr, &scalar, &t),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_gate_topk(s, 1, 0, nullptr, &t, &ids, &t, &ids),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_gate_topk_grad(s, 1, 0, &t, nullptr, &t, &t, &t),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_attention_grad(s, &attrs, nullptr, &t, &t, &t, &t, &t,
                                  nullptr, &t, &t, &t, &t, &t, &t, nullptr,
                                  nullptr),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_expert_grad(s, MOE_RT_RELU, &t, nullptr, nullptr, &t, &t, &t,
                               &t, nullptr, &t),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_embedding_grad(s, nullptr, &t, &t), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(sync(), MOE_RT_OK); // nothing was queued
}

TEST_F(OpsTest, AddSgdCopy) {
  Tensor a({3}, {1, 2, 3}), b({3}, {10, 20, 30}), sum({3}), p({3});
  ASSERT_EQ(moe_rt_add(s, &a, &b, &sum), MOE_RT_OK);
  ASSERT_EQ(moe_rt_sgd(s, &b, &a, 0.5, &p), MOE_RT_OK);
  Tensor dst({5});
  ASSERT_EQ(moe_rt_copy(s, &b, 1, &dst, 3, 2), MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  EXPECT_FLOAT_EQ(sum.f()[2], 33);
  EXPECT_FLOAT_EQ(p.f()[0], 9.5);
  EXPECT_FLOAT_EQ(p.f()[2], 28.5);
  EXPECT_FLOAT_EQ(dst.f()[3], 20);
  EXPECT_FLOAT_EQ(dst.f()[4], 30);
  EXPECT_FLOAT_EQ(dst.f()[0], 0);
  // Out of bounds is refused, not clipped.
  EXPECT_EQ(moe_rt_copy(s, &b, 2, &dst, 0, 2), MOE_RT_INVALID_ARGUMENT);
  Tensor c({4});
  EXPECT_EQ(moe_rt_add(s, &a, &c, &sum), MOE_RT_INVALID_ARGUMENT);
}

TEST_F(OpsTest, CrossEntropyOfUniformLogitsIsLogV) {
  const int64_t vocab = 7;
  Tensor logits({1, 3, vocab}), labels({1, 3}, MOE_RT_I64), loss({});
  labels.i()[0] = 0;
  labels.i()[1] = 3;
  labels.i()[2] = 6;
  ASSERT_EQ(moe_rt_cross_entropy(s, &logits, &labels, &loss), MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  EXPECT_NEAR(loss.f()[0], std::log(double(vocab)), 1e-6);

  // d loss / d logits = (softmax - onehot) / tokens.
  Tensor dloss({}, {1}), dlogits({1, 3, vocab});
  ASSERT_EQ(moe_rt_cross_entropy_grad(s, &logits, &labels, &dloss, &dlogits),
            MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  EXPECT_NEAR(dlogits.f()[0], (1.0 / vocab - 1) / 3, 1e-6);
  EXPECT_NEAR(dlogits.f()[1], (1.0 / vocab) / 3, 1e-6);
}

TEST_F(OpsTest, EmbeddingRowsAndABadIdFailsTheStream) {
  Tensor table({3, 2}, {0, 1, 10, 11, 20, 21}), ids({1, 2}, MOE_RT_I64),
      out({1, 2, 2});
  ids.i()[0] = 2;
  ids.i()[1] = 0;
  ASSERT_EQ(moe_rt_embedding(s, &ids, &table, &out), MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  EXPECT_FLOAT_EQ(out.f()[0], 20);
  EXPECT_FLOAT_EQ(out.f()[3], 1);

  Tensor dout({1, 2, 2}, {1, 2, 3, 4}), dtable({3, 2});
  ASSERT_EQ(moe_rt_embedding_grad(s, &ids, &dout, &dtable), MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  EXPECT_FLOAT_EQ(dtable.f()[4], 1); // row 2 gets token 0's gradient
  EXPECT_FLOAT_EQ(dtable.f()[1], 4); // row 0 gets token 1's
  EXPECT_FLOAT_EQ(dtable.f()[2], 0);

  ids.i()[1] = 3; // out of range: found when the task runs
  ASSERT_EQ(moe_rt_embedding(s, &ids, &table, &out), MOE_RT_OK);
  EXPECT_NE(sync(), MOE_RT_OK);
  EXPECT_NE(std::string(moe_rt_last_error()).find("3"), std::string::npos)
      << moe_rt_last_error();
}

TEST_F(OpsTest, PositionEmbeddingKnownAnswerGradientAndChecks) {
  // B = 2, N = 2, M = 2; a 3-position table (one row more than N).
  Tensor x({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}),
      table({3, 2}, {10, 20, 30, 40, 50, 60}), out({2, 2, 2});
  ASSERT_EQ(moe_rt_position_embedding(s, &x, &table, &out), MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  std::vector<float> want = {11, 22, 33, 44, 15, 26, 37, 48};
  for (int i = 0; i < 8; ++i)
    EXPECT_FLOAT_EQ(out.f()[i], want[i]) << i;

  Tensor dout({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}), dx({2, 2, 2}),
      dtable({3, 2}, {9, 9, 9, 9, 9, 9});
  ASSERT_EQ(moe_rt_position_embedding_grad(s, &dout, &dx, &dtable), MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  std::vector<float> wantT = {6, 8, 10, 12, 0, 0}; // summed over the batch
  for (int i = 0; i < 6; ++i)
    EXPECT_FLOAT_EQ(dtable.f()[i], wantT[i]) << i;
  EXPECT_FLOAT_EQ(dx.f()[5], 6);

  // Fewer positions than tokens, a wrong width, a 2-D activation.
  Tensor shortTable({1, 2}), wideTable({3, 3}), flat({4, 2}), flatOut({4, 2});
  EXPECT_EQ(moe_rt_position_embedding(s, &x, &shortTable, &out),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_rt_last_error()).find("fewer than the sequence"),
            std::string::npos)
      << moe_rt_last_error();
  EXPECT_EQ(moe_rt_position_embedding(s, &x, &wideTable, &out),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_position_embedding(s, &flat, &table, &flatOut),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_position_embedding(s, nullptr, &table, &out),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(sync(), MOE_RT_OK); // nothing was queued
}

TEST_F(OpsTest, BiasAddKnownAnswerGradientAndChecks) {
  // 3 rows (1 x 3 tokens) of M = 2.
  Tensor x({1, 3, 2}, {1, 2, 3, 4, 5, 6}), bias({2}, {10, 20}), out({1, 3, 2});
  ASSERT_EQ(moe_rt_bias_add(s, &x, &bias, &out), MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  std::vector<float> want = {11, 22, 13, 24, 15, 26};
  for (int i = 0; i < 6; ++i)
    EXPECT_FLOAT_EQ(out.f()[i], want[i]) << i;

  // dbias sums the rows once (overwritten, not accumulated); dx = dout.
  Tensor dout({1, 3, 2}, {1, 2, 3, 4, 5, 6}), dx({1, 3, 2}),
      dbias({2}, {9, 9});
  ASSERT_EQ(moe_rt_bias_add_grad(s, &dout, &dx, &dbias), MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  EXPECT_FLOAT_EQ(dbias.f()[0], 9);
  EXPECT_FLOAT_EQ(dbias.f()[1], 12);
  EXPECT_FLOAT_EQ(dx.f()[5], 6);
  ASSERT_EQ(moe_rt_bias_add_grad(s, &dout, nullptr, &dbias), MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  EXPECT_FLOAT_EQ(dbias.f()[1], 12);

  // A bias of the wrong size, a wrong output size, no input.
  Tensor wide({3}), shortOut({1, 2, 2});
  EXPECT_EQ(moe_rt_bias_add(s, &x, &wide, &out), MOE_RT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_rt_last_error()).find("last dimension"),
            std::string::npos)
      << moe_rt_last_error();
  EXPECT_EQ(moe_rt_bias_add(s, &x, &bias, &shortOut), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_bias_add(s, nullptr, &bias, &out), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_bias_add_grad(s, &dout, &dx, &wide),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(sync(), MOE_RT_OK); // nothing was queued
}

TEST_F(OpsTest, GateTopKMatchesTheKernel) {
  const int64_t tokens = 6, model = 4, experts = 5, k = 2;
  Tensor x({1, tokens, model}), w({model, experts});
  fillRandom(x, 1);
  fillRandom(w, 2);
  Tensor idx({1, tokens, k}, MOE_RT_I64), wts({1, tokens, k}),
      counts({experts}, MOE_RT_I64);
  ASSERT_EQ(moe_rt_gate_topk(s, k, 1, &x, &w, &idx, &wts, &counts), MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);

  // The reference: logits = x w in double, then the kernel.
  std::vector<double> logits(tokens * experts);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < experts; ++e)
      for (int64_t m = 0; m < model; ++m)
        logits[t * experts + e] +=
            double(x.f()[t * model + m]) * w.f()[m * experts + e];
  std::vector<int64_t> refIdx(tokens * k), refCounts(experts);
  std::vector<double> refW(tokens * k);
  moe_rt::kernels::softmaxTopK(tokens, experts, k, true, logits.data(),
                               refIdx.data(), refW.data(), refCounts.data());
  int64_t total = 0;
  for (int64_t i = 0; i < tokens * k; ++i) {
    EXPECT_EQ(idx.i()[i], refIdx[i]) << i;
    EXPECT_NEAR(wts.f()[i], refW[i], 1e-5) << i;
  }
  for (int64_t e = 0; e < experts; ++e) {
    EXPECT_EQ(counts.i()[e], refCounts[e]);
    total += counts.i()[e];
  }
  EXPECT_EQ(total, tokens * k);

  Tensor badK({1, tokens, k + 1}, MOE_RT_I64);
  EXPECT_EQ(moe_rt_gate_topk(s, k, 1, &x, &w, &badK, &wts, &counts),
            MOE_RT_INVALID_ARGUMENT);
}

TEST_F(OpsTest, ExpertGradientMatchesFiniteDifferences) {
  // 2 local experts, 3 slots, model 4, hidden 5, SwiGLU (gate present).
  const int64_t el = 2, slots = 3, model = 4, hidden = 5;
  Tensor x({el, slots, model}), up({el, model, hidden}),
      gate({el, model, hidden}), down({el, hidden, model}),
      out({el, slots, model}), c({el, slots, model});
  fillRandom(x, 3);
  fillRandom(up, 4);
  fillRandom(gate, 5);
  fillRandom(down, 6);
  fillRandom(c, 7);
  auto objective = [&]() {
    EXPECT_EQ(moe_rt_expert(s, MOE_RT_SILU, &x, &up, &gate, &down, &out),
              MOE_RT_OK);
    EXPECT_EQ(sync(), MOE_RT_OK);
    double sum = 0;
    for (int64_t i = 0; i < out.n(); ++i)
      sum += double(out.f()[i]) * c.f()[i];
    return sum;
  };
  Tensor dx({el, slots, model}), dup({el, model, hidden}),
      dgate({el, model, hidden}), ddown({el, hidden, model});
  ASSERT_EQ(moe_rt_expert_grad(s, MOE_RT_SILU, &x, &up, &gate, &down, &c, &dx,
                               &dup, &dgate, &ddown),
            MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  const float h = 1e-2f;
  auto check = [&](Tensor &param, Tensor &grad, const char *name) {
    for (int64_t i = 0; i < param.n(); i += 7) {
      float keep = param.f()[i];
      param.f()[i] = keep + h;
      double plus = objective();
      param.f()[i] = keep - h;
      double minus = objective();
      param.f()[i] = keep;
      EXPECT_NEAR(grad.f()[i], (plus - minus) / (2 * h),
                  2e-2 * (1 + std::fabs(grad.f()[i])))
          << name << "[" << i << "]";
    }
  };
  check(x, dx, "x");
  check(up, dup, "up");
  check(gate, dgate, "gate");
  check(down, ddown, "down");

  Tensor badDown({el, hidden + 1, model});
  EXPECT_EQ(moe_rt_expert(s, MOE_RT_SILU, &x, &up, &gate, &badDown, &out),
            MOE_RT_INVALID_ARGUMENT);
}

TEST_F(OpsTest, NormOfAConstantRowIsTheBias) {
  Tensor x({2, 3}, {5, 5, 5, 1, 2, 3}), scale({3}, {1, 1, 1}),
      bias({3}, {7, 8, 9}), y({2, 3});
  ASSERT_EQ(moe_rt_norm(s, MOE_RT_NORM_LAYER, 1e-5, &x, &scale, &bias, &y),
            MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  EXPECT_NEAR(y.f()[0], 7, 1e-5);
  EXPECT_NEAR(y.f()[2], 9, 1e-5);
  // Row 2: mean 2, variance 2/3 -> (-1.2247, 0, 1.2247) + bias.
  EXPECT_NEAR(y.f()[3], 7 - std::sqrt(1.5), 1e-4);
  EXPECT_NEAR(y.f()[4], 8, 1e-5);
  EXPECT_EQ(moe_rt_norm(s, MOE_RT_NORM_RMS, 1e-5, &x, &scale, &bias, &y),
            MOE_RT_INVALID_ARGUMENT); // RMS norm has no bias
}

} // namespace
