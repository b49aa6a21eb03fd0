//===- KernelGradTest.cpp - backward kernels against finite differences ---===//
//
// Every backward kernel is checked against central differences of the
// forward kernel in double precision: with a random cotangent c, the
// gradient of L = sum(c * forward(inputs)) with respect to each input
// element must match. The same templates run in float in the runtime.
//
//===----------------------------------------------------------------------===//

#include "kernels/Dense.h"
#include "kernels/Expert.h"

#include "TestTensor.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <vector>

using namespace moe_rt::kernels;

namespace {

using Vec = std::vector<double>;

Vec random(size_t n, std::mt19937 &rng, double scale = 1.0) {
  return moe_rt_test::randomDoubles(n, rng, scale);
}

double dot(const Vec &a, const Vec &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

/// Checks `analytic` = d(sum(c * f()))/d(input) by central differences.
void checkGradient(const char *what, Vec &input, const Vec &analytic,
                   const std::function<Vec()> &forward, const Vec &c) {
  ASSERT_EQ(input.size(), analytic.size()) << what;
  const double h = 1e-6;
  for (size_t i = 0; i < input.size(); ++i) {
    double saved = input[i];
    input[i] = saved + h;
    double plus = dot(c, forward());
    input[i] = saved - h;
    double minus = dot(c, forward());
    input[i] = saved;
    double numeric = (plus - minus) / (2 * h);
    ASSERT_NEAR(analytic[i], numeric, 1e-5 * (1 + std::abs(numeric)))
        << what << " element " << i;
  }
}

TEST(KernelGrad, Linear) {
  std::mt19937 rng(1);
  int64_t rows = 5, k = 4, n = 3;
  Vec x = random(rows * k, rng), w = random(k * n, rng), b = random(n, rng);
  auto forward = [&] {
    Vec y(rows * n);
    linearForward(rows, k, n, x.data(), w.data(), b.data(), y.data());
    return y;
  };
  Vec c = random(rows * n, rng);
  Vec dx(x.size()), dw(w.size()), db(b.size());
  linearBackward(rows, k, n, x.data(), w.data(), c.data(), dx.data(), dw.data(),
                 db.data());
  checkGradient("dx", x, dx, forward, c);
  checkGradient("dw", w, dw, forward, c);
  checkGradient("db", b, db, forward, c);
}

TEST(KernelGrad, SigmoidGate) {
  std::mt19937 rng(3);
  int64_t rows = 5, m = 4;
  Vec x = random(rows * m, rng), w = random(m, rng), y = random(rows * m, rng);
  auto forward = [&] {
    Vec out(rows * m);
    sigmoidGateForward(rows, m, x.data(), w.data(), y.data(), out.data());
    return out;
  };
  // Against the formula: row 0's first value.
  double z = 0;
  for (int64_t j = 0; j < m; ++j)
    z += x[j] * w[j];
  EXPECT_NEAR(forward()[0], y[0] / (1.0 + std::exp(-z)), 1e-14);
  Vec c = random(rows * m, rng);
  Vec dx(x.size()), dw(w.size()), dy(y.size());
  sigmoidGateBackward(rows, m, x.data(), w.data(), y.data(), c.data(),
                      dx.data(), dw.data(), dy.data());
  checkGradient("dx", x, dx, forward, c);
  checkGradient("dw", w, dw, forward, c);
  checkGradient("dy", y, dy, forward, c);
}

TEST(KernelGrad, LayerNormAndRmsNorm) {
  for (bool rms : {false, true}) {
    std::mt19937 rng(rms ? 3 : 2);
    int64_t rows = 3, m = 6;
    Vec x = random(rows * m, rng), s = random(m, rng), b = random(m, rng);
    auto forward = [&] {
      Vec y(rows * m);
      normForward(rms, rows, m, x.data(), s.data(), rms ? nullptr : b.data(),
                  1e-5, y.data());
      return y;
    };
    Vec c = random(rows * m, rng);
    Vec dx(x.size()), ds(s.size()), db(b.size());
    normBackward(rms, rows, m, x.data(), s.data(), 1e-5, c.data(), dx.data(),
                 ds.data(), rms ? nullptr : db.data());
    checkGradient(rms ? "rms dx" : "layer dx", x, dx, forward, c);
    checkGradient(rms ? "rms dscale" : "layer dscale", s, ds, forward, c);
    if (!rms)
      checkGradient("layer dbias", b, db, forward, c);
  }
}

TEST(KernelGrad, EmbeddingAndBadIds) {
  std::mt19937 rng(4);
  int64_t tokens = 6, vocab = 5, m = 3;
  std::vector<int64_t> ids = {0, 3, 3, 1, 4, 0};
  Vec table = random(vocab * m, rng);
  auto forward = [&] {
    Vec y(tokens * m);
    EXPECT_TRUE(
        embeddingForward(tokens, vocab, m, ids.data(), table.data(), y.data()));
    return y;
  };
  Vec c = random(tokens * m, rng), dtable(table.size());
  ASSERT_TRUE(
      embeddingBackward(tokens, vocab, m, ids.data(), c.data(), dtable.data()));
  checkGradient("dtable", table, dtable, forward, c);
  std::vector<int64_t> bad = {0, 5};
  Vec y(2 * m);
  EXPECT_FALSE(embeddingForward(int64_t(2), vocab, m, bad.data(), table.data(),
                                y.data()));
}

TEST(KernelGrad, CrossEntropyMatchesADirectComputation) {
  std::mt19937 rng(5);
  int64_t tokens = 4, vocab = 7;
  Vec logits = random(tokens * vocab, rng, 2.0);
  std::vector<int64_t> labels = {1, 6, 0, 3};
  auto forward = [&] {
    Vec loss(1);
    EXPECT_TRUE(crossEntropyForward(tokens, vocab, logits.data(), labels.data(),
                                    loss.data()));
    return loss;
  };
  // A known answer: uniform logits give log(vocab).
  Vec flat(tokens * vocab, 0.25), loss(1);
  ASSERT_TRUE(crossEntropyForward(tokens, vocab, flat.data(), labels.data(),
                                  loss.data()));
  EXPECT_NEAR(loss[0], std::log(7.0), 1e-12);
  Vec c = {0.7}, dlogits(logits.size());
  ASSERT_TRUE(crossEntropyBackward(tokens, vocab, logits.data(), labels.data(),
                                   c[0], dlogits.data()));
  checkGradient("dlogits", logits, dlogits, forward, c);
  std::vector<int64_t> bad = {7};
  EXPECT_FALSE(crossEntropyForward(int64_t(1), vocab, logits.data(), bad.data(),
                                   loss.data()));
}

TEST(KernelGrad, ExpertFfnEveryActivationGatedOrNot) {
  for (Activation act : {Activation::Relu, Activation::Gelu, Activation::Silu})
    for (bool gated : {false, true}) {
      std::mt19937 rng(10 + int(act) * 2 + gated);
      int64_t experts = 2, slots = 3, m = 4, h = 5;
      Vec x = random(experts * slots * m, rng),
          up = random(experts * m * h, rng),
          gate = random(experts * m * h, rng),
          down = random(experts * h * m, rng);
      auto forward = [&] {
        Vec y(x.size());
        expertForward(act, experts, slots, m, h, x.data(), up.data(),
                      gated ? gate.data() : nullptr, down.data(), y.data());
        return y;
      };
      Vec c = random(x.size(), rng);
      Vec dx(x.size()), dup(up.size()), dgate(gate.size()), ddown(down.size());
      expertBackward(act, experts, slots, m, h, x.data(), up.data(),
                     gated ? gate.data() : nullptr, down.data(), c.data(),
                     dx.data(), dup.data(), gated ? dgate.data() : nullptr,
                     ddown.data());
      std::string tag = std::string(gated ? "gated " : "") +
                        (act == Activation::Relu   ? "relu"
                         : act == Activation::Gelu ? "gelu"
                                                   : "silu");
      checkGradient((tag + " dx").c_str(), x, dx, forward, c);
      checkGradient((tag + " dup").c_str(), up, dup, forward, c);
      checkGradient((tag + " ddown").c_str(), down, ddown, forward, c);
      if (gated)
        checkGradient((tag + " dgate").c_str(), gate, dgate, forward, c);
    }
}

// GELU is PyTorch's default (exact erf) form: a value from torch.
TEST(Kernels, GeluMatchesPyTorchDefault) {
  // torch.nn.functional.gelu(torch.tensor(1.0)) = 0.8413447460685429
  EXPECT_NEAR(activate(Activation::Gelu, 1.0), 0.8413447460685429, 1e-15);
  // torch.nn.functional.silu(torch.tensor(1.0)) = 0.7310585786300049
  EXPECT_NEAR(activate(Activation::Silu, 1.0), 0.7310585786300049, 1e-15);
}

// The float activations run on Eigen packets (kernels/Activations.h): each
// value and slope within fp32 rounding of the double formulas, on a grid
// that covers both tails (where exp under- or overflows) and zero.
TEST(Kernels, FloatActivationArraysMatchDoubleFormulas) {
  std::vector<float> v;
  for (float x = -30.0f; x <= 30.0f; x += 0.0137f)
    v.push_back(x);
  v.push_back(0.0f);
  v.push_back(-100.0f);
  v.push_back(100.0f);
  int64_t n = int64_t(v.size());
  std::vector<float> value(v.size()), slope(v.size()), alone(v.size());
  for (Activation act : {Activation::Relu, Activation::Gelu, Activation::Silu}) {
    activateArray(act, n, v.data(), value.data(), slope.data());
    for (size_t i = 0; i < v.size(); ++i) {
      double want = activate(act, v[i]), wantSlope = activateGrad(act, v[i]);
      ASSERT_NEAR(value[i], want, 1e-6 * (1 + std::fabs(want)))
          << "activation " << int(act) << " value at " << v[i];
      ASSERT_NEAR(slope[i], wantSlope, 1e-6 * (1 + std::fabs(wantSlope)))
          << "activation " << int(act) << " slope at " << v[i];
    }
    // Asked for one of them, each is the same.
    activateArray<float>(act, n, v.data(), alone.data(), nullptr);
    EXPECT_EQ(alone, value);
    activateArray<float>(act, n, v.data(), nullptr, alone.data());
    EXPECT_EQ(alone, slope);
  }
}

} // namespace

#include "kernels/Attention.h"

namespace {

// Attention: every variant the dialect allows (MHA / GQA, causal or not,
// rotary or not, no / layer / rms pre-norm), all gradients.
TEST(KernelGrad, AttentionEveryVariant) {
  struct Variant {
    int64_t heads, kvHeads;
    bool causal, rotary;
    int norm;
  } variants[] = {{2, 2, false, false, 0},
                  {4, 2, true, true, 2},
                  {4, 1, true, false, 1},
                  {2, 2, false, true, 1}};
  for (const Variant &v : variants) {
    AttentionShape s{2, 4,        8,        v.heads, v.kvHeads,
                     2, v.causal, v.rotary, v.norm,  1e-5};
    std::mt19937 rng(20 + v.heads + v.norm);
    int64_t hd = s.heads * s.headDim, kvd = s.kvHeads * s.headDim;
    Vec x = random(s.batch * s.seq * s.embed, rng),
        wq = random(s.embed * hd, rng), wk = random(s.embed * kvd, rng),
        wv = random(s.embed * kvd, rng), wo = random(hd * s.embed, rng),
        scale = random(s.embed, rng), bias = random(s.embed, rng);
    const double *sp = v.norm ? scale.data() : nullptr;
    const double *bp = v.norm == 1 ? bias.data() : nullptr;
    auto forward = [&] {
      Vec y(x.size());
      attentionForward(s, x.data(), wq.data(), wk.data(), wv.data(), wo.data(),
                       sp, bp, y.data());
      return y;
    };
    Vec c = random(x.size(), rng);
    Vec dx(x.size()), dwq(wq.size()), dwk(wk.size()), dwv(wv.size()),
        dwo(wo.size()), ds(scale.size()), db(bias.size());
    attentionBackward(s, x.data(), wq.data(), wk.data(), wv.data(), wo.data(),
                      sp, bp, c.data(), dx.data(), dwq.data(), dwk.data(),
                      dwv.data(), dwo.data(), v.norm ? ds.data() : nullptr,
                      v.norm == 1 ? db.data() : nullptr);
    checkGradient("attention dx", x, dx, forward, c);
    checkGradient("attention dwq", wq, dwq, forward, c);
    checkGradient("attention dwk", wk, dwk, forward, c);
    checkGradient("attention dwv", wv, dwv, forward, c);
    checkGradient("attention dwo", wo, dwo, forward, c);
    if (v.norm)
      checkGradient("attention dscale", scale, ds, forward, c);
    if (v.norm == 1)
      checkGradient("attention dbias", bias, db, forward, c);
  }
}

/// moe.attention's operands for a gradient check, drawn in one order: x,
/// the four projections, the pre-norm scale, the four biases.
struct AttentionOperands {
  Vec x, wq, wk, wv, wo, scale, bq, bk, bv, bo;
};
AttentionOperands drawAttentionOperands(const AttentionShape &s,
                                        std::mt19937 &rng) {
  int64_t hd = s.heads * s.headDim, kvd = s.kvHeads * s.headDim;
  AttentionOperands a;
  a.x = random(s.batch * s.seq * s.embed, rng);
  a.wq = random(s.embed * hd, rng);
  a.wk = random(s.embed * kvd, rng);
  a.wv = random(s.embed * kvd, rng);
  a.wo = random(hd * s.embed, rng);
  a.scale = random(s.embed, rng);
  a.bq = random(hd, rng);
  a.bk = random(kvd, rng);
  a.bv = random(kvd, rng);
  a.bo = random(s.embed, rng);
  return a;
}

// Rotary base and layout, and the Q/K/V/O biases: every gradient, bias
// gradients included (head size 4: with 2 lanes theta would not matter).
TEST(KernelGrad, AttentionThetaLayoutBiases) {
  struct Variant {
    double theta;
    bool interleaved;
  } variants[] = {{10000.0, true}, {1e6, false}, {3.0, true}};
  for (const Variant &v : variants) {
    AttentionShape s{2, 5, 8, 4, 2, 4, true, true, 2, 1e-5};
    s.theta = v.theta;
    s.interleaved = v.interleaved;
    std::mt19937 rng(40 + v.interleaved);
    int64_t hd = s.heads * s.headDim, kvd = s.kvHeads * s.headDim;
    AttentionOperands a = drawAttentionOperands(s, rng);
    Vec &x = a.x, &wq = a.wq, &wk = a.wk, &wv = a.wv, &wo = a.wo,
        &scale = a.scale, &bq = a.bq, &bk = a.bk, &bv = a.bv, &bo = a.bo;
    AttentionBias<double> pb{bq.data(), bk.data(), bv.data(), bo.data()};
    auto forward = [&] {
      Vec y(x.size());
      attentionForward(s, x.data(), wq.data(), wk.data(), wv.data(), wo.data(),
                       scale.data(), (const double *)nullptr, y.data(), pb);
      return y;
    };
    Vec c = random(x.size(), rng);
    Vec dx(x.size()), dwq(wq.size()), dwk(wk.size()), dwv(wv.size()),
        dwo(wo.size()), ds(scale.size()), dbq(hd), dbk(kvd), dbv(kvd),
        dbo(s.embed);
    attentionBackward(s, x.data(), wq.data(), wk.data(), wv.data(), wo.data(),
                      scale.data(), (const double *)nullptr, c.data(),
                      dx.data(), dwq.data(), dwk.data(), dwv.data(),
                      dwo.data(), ds.data(), (double *)nullptr, pb,
                      AttentionBiasGrad<double>{dbq.data(), dbk.data(),
                                                dbv.data(), dbo.data()});
    checkGradient("attention dx", x, dx, forward, c);
    checkGradient("attention dwq", wq, dwq, forward, c);
    checkGradient("attention dwk", wk, dwk, forward, c);
    checkGradient("attention dscale", scale, ds, forward, c);
    checkGradient("attention dbq", bq, dbq, forward, c);
    checkGradient("attention dbk", bk, dbk, forward, c);
    checkGradient("attention dbv", bv, dbv, forward, c);
    checkGradient("attention dbo", bo, dbo, forward, c);
  }
}

// The Q/K/V clamp (clip_qkv): every gradient by finite differences (zero
// where the clamp cuts), with and without biases; the clamp cuts a good
// share of the projections here, and the output differs from the unclamped
// op's, so a kernel that dropped the clamp would fail.
TEST(KernelGrad, AttentionClipQkv) {
  for (bool biased : {false, true}) {
    AttentionShape s{2, 5, 8, 4, 2, 4, true, true, 2, 1e-5};
    s.clip = 0.7;
    std::mt19937 rng(70 + biased);
    int64_t hd = s.heads * s.headDim, kvd = s.kvHeads * s.headDim;
    AttentionOperands a = drawAttentionOperands(s, rng);
    Vec &x = a.x, &wq = a.wq, &wk = a.wk, &wv = a.wv, &wo = a.wo,
        &scale = a.scale, &bq = a.bq, &bk = a.bk, &bv = a.bv, &bo = a.bo;
    AttentionBias<double> pb;
    if (biased)
      pb = {bq.data(), bk.data(), bv.data(), bo.data()};
    auto forwardWith = [&](double clip) {
      AttentionShape t = s;
      t.clip = clip;
      Vec y(x.size());
      attentionForward(t, x.data(), wq.data(), wk.data(), wv.data(),
                       wo.data(), scale.data(), (const double *)nullptr,
                       y.data(), pb);
      return y;
    };
    auto forward = [&] { return forwardWith(s.clip); };
    Vec clipped = forward(), plain = forwardWith(0.0);
    double diff = 0;
    for (size_t i = 0; i < plain.size(); ++i)
      diff = std::max(diff, std::abs(clipped[i] - plain[i]));
    EXPECT_GT(diff, 0.05) << "the clamp changes the output";
    Vec c = random(x.size(), rng);
    Vec dx(x.size()), dwq(wq.size()), dwk(wk.size()), dwv(wv.size()),
        dwo(wo.size()), ds(scale.size()), dbq(hd), dbk(kvd), dbv(kvd),
        dbo(s.embed);
    AttentionBiasGrad<double> dpb;
    if (biased)
      dpb = {dbq.data(), dbk.data(), dbv.data(), dbo.data()};
    attentionBackward(s, x.data(), wq.data(), wk.data(), wv.data(), wo.data(),
                      scale.data(), (const double *)nullptr, c.data(),
                      dx.data(), dwq.data(), dwk.data(), dwv.data(),
                      dwo.data(), ds.data(), (double *)nullptr, pb, dpb);
    checkGradient("clipped attention dx", x, dx, forward, c);
    checkGradient("clipped attention dwq", wq, dwq, forward, c);
    checkGradient("clipped attention dwk", wk, dwk, forward, c);
    checkGradient("clipped attention dwv", wv, dwv, forward, c);
    checkGradient("clipped attention dscale", scale, ds, forward, c);
    if (biased) {
      checkGradient("clipped attention dbq", bq, dbq, forward, c);
      checkGradient("clipped attention dbv", bv, dbv, forward, c);
    }
  }
}

// Rotary against the formula (RoFormer eq. 15) for one head of size 4 at
// position 3: pair j turns by 3 * theta^(-j/2); rotate-half pairs lanes
// (0, 2), (1, 3), interleaved (0, 1), (2, 3). The table is built once.
TEST(Kernels, RotaryLayoutsAndThetaMatchTheFormula) {
  const double theta = 50.0, x[4] = {0.3, -1.1, 0.7, 2.0};
  auto table = rotaryTable(4, 4, theta);
  EXPECT_EQ(table.get(), rotaryTable(4, 4, theta).get());
  EXPECT_NE(table.get(), rotaryTable(4, 4, 2 * theta).get());
  for (bool interleaved : {false, true}) {
    double v[4] = {x[0], x[1], x[2], x[3]}, want[4];
    for (int j = 0; j < 2; ++j) {
      double a = 3.0 * std::pow(theta, -j / 2.0);
      int p = interleaved ? 2 * j : j, q = interleaved ? 2 * j + 1 : j + 2;
      want[p] = x[p] * std::cos(a) - x[q] * std::sin(a);
      want[q] = x[q] * std::cos(a) + x[p] * std::sin(a);
    }
    rotaryApply(*table, interleaved, v, 1, 4, 3, false);
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(v[i], want[i], 1e-12) << "lane " << i << " interleaved "
                                        << interleaved;
    rotaryApply(*table, interleaved, v, 1, 4, 3, true); // the inverse
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(v[i], x[i], 1e-12);
  }
}

// Causality: the output at position i does not depend on later tokens.
TEST(Kernels, CausalAttentionIgnoresTheFuture) {
  AttentionShape s{1, 5, 4, 2, 2, 2, true, true, 0, 1e-5};
  std::mt19937 rng(31);
  Vec x = random(5 * 4, rng), w = random(4 * 4, rng), y1(x.size()),
      y2(x.size());
  attentionForward(s, x.data(), w.data(), w.data(), w.data(), w.data(),
                   (const double *)nullptr, (const double *)nullptr, y1.data());
  for (int e = 0; e < 4; ++e)
    x[4 * 4 + e] += 3.0; // change the last token only
  attentionForward(s, x.data(), w.data(), w.data(), w.data(), w.data(),
                   (const double *)nullptr, (const double *)nullptr, y2.data());
  for (int i = 0; i < 4 * 4; ++i)
    EXPECT_DOUBLE_EQ(y1[i], y2[i]) << "position " << i / 4;
}

} // namespace
