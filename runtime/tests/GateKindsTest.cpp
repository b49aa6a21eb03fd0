//===- GateKindsTest.cpp - moe_rt_gate: every kind, forward and vjp -------===//
//
// Known answers on tiny inputs (computed by hand from the definitions in
// ops.h), the noise's determinism, finite-difference checks of every vjp,
// and the argument checks (aux required or not; expert_choice, whose E x C
// outputs these token-choice shapes are not, is ExpertChoiceTest.cpp's).
//
//===----------------------------------------------------------------------===//

#include "moe_rt/ops.h"

#include "TestTensor.h"

#include "kernels/Gates.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace {

using moe_rt_test::Tensor;

using moe_rt_test::checkCentralDifferences;
using moe_rt_test::fillRandom;

double sig(double v) { return 1 / (1 + std::exp(-v)); }

struct GateKindsTest : moe_rt_test::CpuStreamTest {};

TEST_F(GateKindsTest, SigmoidKnownAnswer) {
  // x = [1, 0], [0, 1]; w = I_2 | [-1, -1]: logits row0 = [1, 0, -1],
  // row1 = [0, 1, -1]. k = 2 keeps experts {0, 1} / {1, 0}.
  Tensor x({1, 2, 2}, {1, 0, 0, 1}), w({2, 3}, {1, 0, -1, 0, 1, -1});
  Tensor idx({1, 2, 2}, MOE_RT_I64), wts({1, 2, 2}), counts({3}, MOE_RT_I64);
  ASSERT_EQ(moe_rt_gate(s, MOE_RT_GATE_SIGMOID, 2, 0, 0, 1.0, &x, &w, nullptr,
                        &idx, &wts, &counts),
            MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  EXPECT_EQ(idx.i()[0], 0);
  EXPECT_EQ(idx.i()[1], 1);
  EXPECT_EQ(idx.i()[2], 1);
  EXPECT_EQ(idx.i()[3], 0);
  EXPECT_NEAR(wts.f()[0], sig(1), 1e-6);
  EXPECT_NEAR(wts.f()[1], 0.5, 1e-6);
  EXPECT_EQ(counts.i()[0], 2);
  EXPECT_EQ(counts.i()[1], 2);
  EXPECT_EQ(counts.i()[2], 0);
  // normalize: sigma(1) / (sigma(1) + 1/2).
  ASSERT_EQ(moe_rt_gate(s, MOE_RT_GATE_SIGMOID, 2, 1, 0, 1.0, &x, &w, nullptr,
                        &idx, &wts, &counts),
            MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  EXPECT_NEAR(wts.f()[0], sig(1) / (sig(1) + 0.5), 1e-6);
}

TEST_F(GateKindsTest, CosineKnownAnswer) {
  // W_proj = I_2, w columns e0 = (2, 0), e1 = (1, 1): for x = (3, 0) the
  // cosines are 1 and 1/sqrt(2); tau = 0.5 doubles them before the softmax.
  Tensor x({1, 2}, {3, 0}), proj({2, 2}, {1, 0, 0, 1}), w({2, 2}, {2, 1, 0, 1});
  Tensor idx({1, 1}, MOE_RT_I64), wts({1, 1}), counts({2}, MOE_RT_I64);
  ASSERT_EQ(moe_rt_gate(s, MOE_RT_GATE_COSINE, 1, 0, 0, 0.5, &x, &w, &proj,
                        &idx, &wts, &counts),
            MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  double a = 2.0, b = 2.0 / std::sqrt(2.0);
  EXPECT_EQ(idx.i()[0], 0);
  EXPECT_NEAR(wts.f()[0], std::exp(a) / (std::exp(a) + std::exp(b)), 1e-6);
}

TEST_F(GateKindsTest, NoisyIsSeededDeterministicAndMatchesItsDefinition) {
  // x: 1 sample x 5 positions x 3 features.
  const int64_t t = 5, m = 3, e = 4, k = 2;
  Tensor x({1, t, m}), w({m, e}), wn({m, e});
  fillRandom(x, 1);
  fillRandom(w, 2);
  fillRandom(wn, 3);
  Tensor idx({t, k}, MOE_RT_I64), wts({t, k}), counts({e}, MOE_RT_I64);
  Tensor idx2({t, k}, MOE_RT_I64), wts2({t, k});
  ASSERT_EQ(moe_rt_gate(s, MOE_RT_GATE_NOISY_TOPK, k, 0, 7, 1.0, &x, &w, &wn,
                        &idx, &wts, &counts),
            MOE_RT_OK);
  ASSERT_EQ(moe_rt_gate(s, MOE_RT_GATE_NOISY_TOPK, k, 0, 7, 1.0, &x, &w, &wn,
                        &idx2, &wts2, &counts),
            MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  // The same seed and x: the same routing, bit for bit.
  for (int64_t i = 0; i < t * k; ++i) {
    EXPECT_EQ(idx.i()[i], idx2.i()[i]);
    EXPECT_EQ(wts.f()[i], wts2.f()[i]);
  }
  // Against the definition: softmax of x·W + n softplus(x·Wn) at the kept
  // experts, n from the documented hash.
  for (int64_t r = 0; r < t; ++r) {
    uint64_t h = moe_rt::kernels::positionHash(7, r);
    std::vector<double> score(e);
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < e; ++j) {
      double c = 0, nz = 0;
      for (int64_t i = 0; i < m; ++i) {
        c += double(x.f()[r * m + i]) * w.f()[i * e + j];
        nz += double(x.f()[r * m + i]) * wn.f()[i * e + j];
      }
      score[j] =
          c + moe_rt::kernels::gateNoise(h, j) * std::log1p(std::exp(nz));
      mx = std::max(mx, score[j]);
    }
    for (double v : score)
      sum += std::exp(v - mx);
    int64_t best = std::max_element(score.begin(), score.end()) - score.begin();
    EXPECT_EQ(idx.i()[r * k], best) << r;
    EXPECT_NEAR(wts.f()[r * k], std::exp(score[best] - mx) / sum, 1e-5) << r;
  }
  // Another seed routes differently somewhere (the noise is not ignored).
  Tensor wts3({t, k});
  for (int64_t i = 0; i < wn.n(); ++i)
    wn.f()[i] += 2; // large noise scale, so the seed matters
  ASSERT_EQ(moe_rt_gate(s, MOE_RT_GATE_NOISY_TOPK, k, 0, 7, 1.0, &x, &w, &wn,
                        &idx, &wts, &counts),
            MOE_RT_OK);
  ASSERT_EQ(moe_rt_gate(s, MOE_RT_GATE_NOISY_TOPK, k, 0, 8, 1.0, &x, &w, &wn,
                        &idx2, &wts3, &counts),
            MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  bool differs = false;
  for (int64_t i = 0; i < t * k; ++i)
    differs |= wts.f()[i] != wts3.f()[i];
  EXPECT_TRUE(differs);
}

TEST_F(GateKindsTest, NoiseDiffersPerSampleAndIgnoresMicroBatching) {
  // A batch of 2 samples x 2 positions: the samples draw different noise,
  // and sample 1 alone (a micro-batch whose first sample is 1) draws
  // exactly its noise in the whole batch.
  std::vector<double> both, first, second;
  moe_rt::kernels::noiseFor(5, 4, 2, 3, both);
  moe_rt::kernels::noiseFor(5, 2, 2, 3, first, 0);
  moe_rt::kernels::noiseFor(5, 2, 2, 3, second, 1);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(both[i], first[i]);
    EXPECT_EQ(both[6 + i], second[i]);
    EXPECT_NE(first[i], second[i]) << i; // samples differ
  }
  EXPECT_NE(first[0], first[3]); // positions differ
  EXPECT_NE(first[0], first[1]); // experts differ
  // Sample 0 keeps the seed's position hash (sampleSeed(seed, 0) = seed).
  EXPECT_EQ(first[4],
            moe_rt::kernels::gateNoise(moe_rt::kernels::positionHash(5, 1), 1));
}

TEST_F(GateKindsTest, NoisyAtFirstSampleMatchesTheWholeBatch) {
  // moe_rt_gate on 2 samples = moe_rt_gate_at on each with its first
  // sample; the forward and its vjp both.
  const int64_t n = 3, m = 4, e = 4, k = 2;
  Tensor x({2, n, m}), w({m, e}), wn({m, e});
  fillRandom(x, 11);
  fillRandom(w, 12);
  fillRandom(wn, 13);
  for (int64_t i = 0; i < wn.n(); ++i)
    wn.f()[i] += 2; // large noise, so a wrong sample shows
  Tensor half1({1, n, m}, std::vector<float>(x.f() + n * m, x.f() + 2 * n * m));
  Tensor idx({2, n, k}, MOE_RT_I64), wts({2, n, k}), counts({e}, MOE_RT_I64);
  Tensor idx1({1, n, k}, MOE_RT_I64), wts1({1, n, k}), wts0({1, n, k});
  ASSERT_EQ(moe_rt_gate(s, MOE_RT_GATE_NOISY_TOPK, k, 0, 9, 1.0, &x, &w, &wn,
                        &idx, &wts, &counts),
            MOE_RT_OK);
  ASSERT_EQ(moe_rt_gate_at(s, MOE_RT_GATE_NOISY_TOPK, k, 0, 9, 1, 1.0, &half1,
                           &w, &wn, &idx1, &wts1, &counts),
            MOE_RT_OK);
  ASSERT_EQ(moe_rt_gate_at(s, MOE_RT_GATE_NOISY_TOPK, k, 0, 9, 0, 1.0, &half1,
                           &w, &wn, &idx1, &wts0, &counts),
            MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  bool differs = false;
  for (int64_t i = 0; i < n * k; ++i) {
    EXPECT_EQ(wts1.f()[i], wts.f()[n * k + i]) << i;
    differs |= wts0.f()[i] != wts1.f()[i];
  }
  EXPECT_TRUE(differs) << "the first sample is ignored";
  // vjp: dx of sample 1 alone at first sample 1 = its rows in the batch.
  Tensor dwts({2, n, k}), dwts1({1, n, k});
  fillRandom(dwts, 14);
  for (int64_t i = 0; i < n * k; ++i)
    dwts1.f()[i] = dwts.f()[n * k + i];
  for (int64_t i = 0; i < n * k; ++i)
    dwts.f()[i] = 0; // sample 0 contributes nothing to dw, dwn
  Tensor dx({2, n, m}), dw({m, e}), dwn({m, e});
  Tensor dx1({1, n, m}), dw1({m, e}), dwn1({m, e});
  ASSERT_EQ(moe_rt_gate_grad(s, MOE_RT_GATE_NOISY_TOPK, k, 0, 9, 1.0, &x, &w,
                             &wn, &dwts, &dx, &dw, &dwn),
            MOE_RT_OK);
  ASSERT_EQ(moe_rt_gate_grad_at(s, MOE_RT_GATE_NOISY_TOPK, k, 0, 9, 1, 1.0,
                                &half1, &w, &wn, &dwts1, &dx1, &dw1, &dwn1),
            MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  for (int64_t i = 0; i < n * m; ++i)
    EXPECT_NEAR(dx1.f()[i], dx.f()[n * m + i], 1e-6) << i;
  for (int64_t i = 0; i < m * e; ++i) {
    EXPECT_NEAR(dw1.f()[i], dw.f()[i], 1e-6) << i;
    EXPECT_NEAR(dwn1.f()[i], dwn.f()[i], 1e-6) << i;
  }
  // A negative first sample is refused.
  EXPECT_EQ(moe_rt_gate_at(s, MOE_RT_GATE_NOISY_TOPK, k, 0, 9, -1, 1.0, &half1,
                           &w, &wn, &idx1, &wts1, &counts),
            MOE_RT_INVALID_ARGUMENT);
}

TEST_F(GateKindsTest, StepSeedsDifferPerStepAndRepeat) {
  uint64_t s1 = moe_rt_gate_step_seed(1, 1), s2 = moe_rt_gate_step_seed(1, 2);
  EXPECT_NE(s1, s2);
  EXPECT_NE(s1, moe_rt_gate_step_seed(2, 1));
  EXPECT_EQ(s1, moe_rt_gate_step_seed(1, 1));
  using moe_rt::kernels::mix64;
  EXPECT_EQ(s2, mix64(mix64(1) ^ 2));
}

TEST_F(GateKindsTest, NoiseSamplesLookStandardNormal) {
  // 20000 samples: mean ~ 0, variance ~ 1 (5 sigma bounds).
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    double v = moe_rt::kernels::gateNoise(moe_rt::kernels::mix64(i), i % 7);
    sum += v;
    sq += v * v;
  }
  EXPECT_NEAR(sum / n, 0.0, 5.0 / std::sqrt(double(n)));
  EXPECT_NEAR(sq / n, 1.0, 5.0 * std::sqrt(2.0 / n));
}

/// Finite differences of sum(weights ⊙ c) against moe_rt_gate_grad.
void gradientCheck(moe_rt_stream s, moe_rt_gate_kind kind, int normalize,
                   bool checkX) {
  const int64_t t = 6, m = 4, e = 5, k = 2, d = 3;
  double tau = 0.5;
  bool cosine = kind == MOE_RT_GATE_COSINE;
  bool aux = cosine || kind == MOE_RT_GATE_NOISY_TOPK;
  Tensor x({2, 3, m}), w({cosine ? d : m, e}), a({m, cosine ? d : e}),
      c({2, 3, k});
  fillRandom(x, 11);
  fillRandom(w, 12);
  fillRandom(a, 13, 0.5);
  fillRandom(c, 14);
  Tensor idx({2, 3, k}, MOE_RT_I64), wts({2, 3, k}), counts({e}, MOE_RT_I64);
  moe_rt_tensor *ap = aux ? &a : nullptr;
  auto objective = [&]() {
    EXPECT_EQ(moe_rt_gate(s, kind, k, normalize, 3, tau, &x, &w, ap, &idx, &wts,
                          &counts),
              MOE_RT_OK);
    EXPECT_EQ(moe_rt_stream_synchronize(s, 10.0), MOE_RT_OK);
    double sum = 0;
    for (int64_t i = 0; i < wts.n(); ++i)
      sum += double(wts.f()[i]) * c.f()[i];
    return sum;
  };
  Tensor dx({2, 3, m}), dw({cosine ? d : m, e}), da({m, cosine ? d : e});
  ASSERT_EQ(moe_rt_gate_grad(s, kind, k, normalize, 3, tau, &x, &w, ap, &c, &dx,
                             &dw, aux ? &da : nullptr),
            MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(s, 10.0), MOE_RT_OK);
  std::string kindName = "kind " + std::to_string(kind) + " ";
  int checked = 0;
  if (checkX)
    checked += checkCentralDifferences(x, dx, idx, objective, kindName + "x");
  checked += checkCentralDifferences(w, dw, idx, objective, kindName + "w");
  if (aux)
    checked += checkCentralDifferences(a, da, idx, objective, kindName + "aux");
  EXPECT_GT(checked, int(w.n())); // most points were checked
  // A nonzero gradient everywhere it should be: the check is not vacuous.
  double norm = 0;
  for (int64_t i = 0; i < dw.n(); ++i)
    norm += std::fabs(dw.f()[i]);
  EXPECT_GT(norm, 1e-3);
  if (aux) {
    norm = 0;
    for (int64_t i = 0; i < da.n(); ++i)
      norm += std::fabs(da.f()[i]);
    EXPECT_GT(norm, 1e-3);
  }
}

TEST_F(GateKindsTest, SigmoidGradientMatchesFiniteDifferences) {
  gradientCheck(s, MOE_RT_GATE_SIGMOID, 0, true);
  gradientCheck(s, MOE_RT_GATE_SIGMOID, 1, true);
}

TEST_F(GateKindsTest, CosineGradientMatchesFiniteDifferences) {
  gradientCheck(s, MOE_RT_GATE_COSINE, 0, true);
  gradientCheck(s, MOE_RT_GATE_COSINE, 1, true);
}

TEST_F(GateKindsTest, SoftmaxThroughMoeRtGateMatchesFiniteDifferences) {
  gradientCheck(s, MOE_RT_GATE_SOFTMAX_TOPK, 1, true);
}

TEST_F(GateKindsTest, NoisyGradientMatchesFiniteDifferences) {
  gradientCheck(s, MOE_RT_GATE_NOISY_TOPK, 0, true);
  gradientCheck(s, MOE_RT_GATE_NOISY_TOPK, 1, true);
}

TEST_F(GateKindsTest, ArgumentChecks) {
  Tensor x({2, 3}), w({3, 4}), a({3, 4}), idx({2, 1}, MOE_RT_I64), wts({2, 1}),
      counts({4}, MOE_RT_I64);
  EXPECT_EQ(moe_rt_gate(s, MOE_RT_GATE_EXPERT_CHOICE, 1, 0, 0, 1.0, &x, &w,
                        nullptr, &idx, &wts, &counts),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_rt_last_error())
                .find("expert_choice's indices must be E x C"),
            std::string::npos);
  EXPECT_EQ(moe_rt_gate(s, MOE_RT_GATE_NOISY_TOPK, 1, 0, 0, 1.0, &x, &w,
                        nullptr, &idx, &wts, &counts),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_gate(s, MOE_RT_GATE_SIGMOID, 1, 0, 0, 1.0, &x, &w, &a, &idx,
                        &wts, &counts),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_gate(s, MOE_RT_GATE_SIGMOID, 5, 0, 0, 1.0, &x, &w, nullptr,
                        &idx, &wts, &counts),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_gate(s, moe_rt_gate_kind(9), 1, 0, 0, 1.0, &x, &w, nullptr,
                        &idx, &wts, &counts),
            MOE_RT_INVALID_ARGUMENT);
  // cosine: W_proj M x d with d = 4 != w's rows 3.
  Tensor proj({3, 4});
  EXPECT_EQ(moe_rt_gate(s, MOE_RT_GATE_COSINE, 1, 0, 0, 0.5, &x, &w, &proj,
                        &idx, &wts, &counts),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_gate(s, MOE_RT_GATE_COSINE, 1, 0, 0, 0.0, &x, &w, &a, &idx,
                        &wts, &counts),
            MOE_RT_INVALID_ARGUMENT);
  Tensor dx({2, 3}), dw({3, 4});
  // The vjp needs daux exactly when aux is given.
  EXPECT_EQ(moe_rt_gate_grad(s, MOE_RT_GATE_NOISY_TOPK, 1, 0, 0, 1.0, &x, &w,
                             &a, &wts, &dx, &dw, nullptr),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(sync(), MOE_RT_OK); // refused calls queue nothing
}

} // namespace
