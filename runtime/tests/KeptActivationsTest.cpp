//===- KeptActivationsTest.cpp - expert vjps on kept pre-activations ------===//
//
// moe_rt_stream_keep_activations (moe_rt/kept_activations.h): on a keeping
// stream the expert and attention vjps use their forward's intermediates
// instead of recomputing them. The gradients equal a recomputing stream's
// bit for bit (padded and variable-count experts, gated and not; attention
// with pre-norm, rotary, GQA, causal); that the kept values are what the
// vjp used shows when a weight changes between the forward and the vjp
// (which a keeping stream's owner promises never to do): the keeping vjp
// then differs from a recomputing one, and a second vjp (nothing kept any
// more) recomputes.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/kept_activations.h"
#include "moe_rt/ops.h"

#include "TestTensor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

namespace {

using moe_rt_test::Tensor;

const int64_t El = 3, G = 2, R = 6, M = 5, H = 7;

struct Grads {
  std::vector<float> dx, dup, dgate, ddown;
  bool operator==(const Grads &o) const {
    return dx == o.dx && dup == o.dup && dgate == o.dgate && ddown == o.ddown;
  }
};

/// One expert op (padded or variable-count) and its operands.
struct ExpertCase {
  bool variable, gated;
  Tensor rows{{El, G}, MOE_RT_I64}, x{{El, R, M}}, up{{El, M, H}},
      gate{{El, M, H}}, down{{El, H, M}}, dout{{El, R, M}}, out{{El, R, M}};

  ExpertCase(bool variable, bool gated) : variable(variable), gated(gated) {
    // Expert 0 full, expert 1 empty, expert 2 with one row.
    const int64_t filled[] = {4, 2, 0, 0, 0, 1};
    std::copy(filled, filled + El * G, rows.i());
    moe_rt_test::fillRandom(x, 11);
    moe_rt_test::fillRandom(up, 12, 0.5f);
    moe_rt_test::fillRandom(gate, 13, 0.5f);
    moe_rt_test::fillRandom(down, 14, 0.5f);
    moe_rt_test::fillRandom(dout, 15);
  }
  moe_rt_tensor *g() { return gated ? &gate : nullptr; }

  void forward(moe_rt_stream s) {
    ASSERT_EQ(variable ? moe_rt_expert_v(s, MOE_RT_SILU, &rows, &x, &up, g(),
                                         &down, &out)
                       : moe_rt_expert(s, MOE_RT_SILU, &x, &up, g(), &down,
                                       &out),
              MOE_RT_OK);
    ASSERT_EQ(moe_rt_stream_synchronize(s, 10.0), MOE_RT_OK);
  }
  Grads vjp(moe_rt_stream s) {
    // Stale values in the outputs: the vjp overwrites them.
    Tensor dx({El, R, M}), dup({El, M, H}), dgate({El, M, H}),
        ddown({El, H, M});
    for (Tensor *t : {std::addressof(dx), std::addressof(dup), std::addressof(dgate), std::addressof(ddown)})
      std::fill(t->f(), t->f() + t->n(), 9.0f);
    moe_rt_tensor *dg = gated ? &dgate : nullptr;
    EXPECT_EQ(variable ? moe_rt_expert_v_grad(s, MOE_RT_SILU, &rows, &x, &up,
                                              g(), &down, &dout, &dx, &dup, dg,
                                              &ddown)
                       : moe_rt_expert_grad(s, MOE_RT_SILU, &x, &up, g(),
                                            &down, &dout, &dx, &dup, dg,
                                            &ddown),
              MOE_RT_OK);
    EXPECT_EQ(moe_rt_stream_synchronize(s, 10.0), MOE_RT_OK);
    auto v = [](Tensor &t) { return std::vector<float>(t.f(), t.f() + t.n()); };
    return {v(dx), v(dup), gated ? v(dgate) : std::vector<float>{}, v(ddown)};
  }
};

/// A recomputing and a keeping CPU stream.
struct TwoStreams : ::testing::Test {
  moe_rt_stream plain = nullptr, keeping = nullptr;
  void SetUp() override {
    ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &plain), MOE_RT_OK);
    ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &keeping), MOE_RT_OK);
    ASSERT_EQ(moe_rt_stream_keep_activations(keeping, 1), MOE_RT_OK);
  }
  void TearDown() override {
    moe_rt_stream_destroy(plain);
    moe_rt_stream_destroy(keeping);
  }
};

struct KeptActivationsTest
    : TwoStreams,
      ::testing::WithParamInterface<std::tuple<bool, bool>> {};
using KeptActivationsAttentionTest = TwoStreams;

TEST_P(KeptActivationsTest, SameGradientsAsRecomputing) {
  auto [variable, gated] = GetParam();
  ExpertCase c(variable, gated);
  c.forward(plain);
  std::vector<float> y(c.out.f(), c.out.f() + c.out.n());
  Grads want = c.vjp(plain);
  for (int round = 0; round < 2; ++round) { // the second reuses the pool
    c.forward(keeping);
    EXPECT_EQ(std::vector<float>(c.out.f(), c.out.f() + c.out.n()), y);
    EXPECT_TRUE(c.vjp(keeping) == want) << "round " << round;
  }
}

TEST_P(KeptActivationsTest, TheVjpUsesWhatTheForwardKept) {
  auto [variable, gated] = GetParam();
  ExpertCase c(variable, gated);
  c.forward(keeping);
  for (int64_t i = 0; i < c.up.n(); ++i) // broken promise: new weights
    c.up.f()[i] *= 2;
  Grads kept = c.vjp(keeping), recomputed = c.vjp(plain);
  EXPECT_FALSE(kept == recomputed);
  // The entry was taken: a second vjp finds nothing and recomputes.
  EXPECT_TRUE(c.vjp(keeping) == recomputed);
  // A recomputing stream's forward keeps nothing for a keeping vjp.
  c.forward(plain);
  for (int64_t i = 0; i < c.up.n(); ++i)
    c.up.f()[i] *= 0.5f;
  EXPECT_TRUE(c.vjp(keeping) == c.vjp(plain));
}

INSTANTIATE_TEST_SUITE_P(PaddedAndVariable, KeptActivationsTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Bool()));

/// One attention call (RMS pre-norm, rotary, causal, 4 query heads on 2
/// key/value heads) and its vjp.
struct AttentionCase {
  static constexpr int64_t B = 2, N = 5, Mx = 8, Hq = 4, KV = 2, D = 2;
  moe_rt_attention_attrs a{Hq, KV, D, 1, 1, MOE_RT_NORM_RMS, 1e-5};
  Tensor x{{B, N, Mx}}, wq{{Mx, Hq * D}}, wk{{Mx, KV * D}}, wv{{Mx, KV * D}},
      wo{{Hq * D, Mx}}, scale{{Mx}}, dout{{B, N, Mx}}, out{{B, N, Mx}};
  AttentionCase() {
    unsigned seed = 21;
    for (Tensor *t : {std::addressof(x), std::addressof(wq), std::addressof(wk), std::addressof(wv), std::addressof(wo), std::addressof(scale), std::addressof(dout)})
      moe_rt_test::fillRandom(*t, seed++);
  }
  void forward(moe_rt_stream s) {
    ASSERT_EQ(moe_rt_attention(s, &a, &x, &wq, &wk, &wv, &wo, &scale, nullptr,
                               &out),
              MOE_RT_OK);
    ASSERT_EQ(moe_rt_stream_synchronize(s, 10.0), MOE_RT_OK);
  }
  std::vector<std::vector<float>> vjp(moe_rt_stream s) {
    Tensor dx({B, N, Mx}), dwq({Mx, Hq * D}), dwk({Mx, KV * D}),
        dwv({Mx, KV * D}), dwo({Hq * D, Mx}), dscale({Mx});
    EXPECT_EQ(moe_rt_attention_grad(s, &a, &x, &wq, &wk, &wv, &wo, &scale,
                                    nullptr, &dout, &dx, &dwq, &dwk, &dwv,
                                    &dwo, &dscale, nullptr),
              MOE_RT_OK);
    EXPECT_EQ(moe_rt_stream_synchronize(s, 10.0), MOE_RT_OK);
    std::vector<std::vector<float>> all;
    for (Tensor *t : {std::addressof(dx), std::addressof(dwq), std::addressof(dwk), std::addressof(dwv), std::addressof(dwo), std::addressof(dscale)})
      all.emplace_back(t->f(), t->f() + t->n());
    return all;
  }
};

TEST_F(KeptActivationsAttentionTest, SameGradientsAsRecomputing) {
  AttentionCase c;
  c.forward(plain);
  auto want = c.vjp(plain);
  for (int round = 0; round < 2; ++round) {
    c.forward(keeping);
    EXPECT_TRUE(c.vjp(keeping) == want) << "round " << round;
  }
}

TEST_F(KeptActivationsAttentionTest, TheVjpUsesWhatTheForwardKept) {
  AttentionCase c;
  c.forward(keeping);
  for (int64_t i = 0; i < c.wq.n(); ++i) // broken promise: new weights
    c.wq.f()[i] *= 2;
  auto kept = c.vjp(keeping), recomputed = c.vjp(plain);
  EXPECT_FALSE(kept == recomputed);
  EXPECT_TRUE(c.vjp(keeping) == recomputed);
}

TEST(KeptActivations, NullStreamIsRefused) {
  EXPECT_EQ(moe_rt_stream_keep_activations(nullptr, 1),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_rt_last_error()).find("NULL stream"),
            std::string::npos);
}

} // namespace
