//===- OptimizerTest.cpp - optimizer updates, norms and lr schedules ------===//
//
// moe_rt_adamw / moe_rt_sgd_momentum over several steps against a float64
// transcription of torch.optim's algorithms (PyTorch 1.13
// _single_tensor_adamw / _single_tensor_sgd, written here statement by
// statement, not from the runtime's bodies); the same templates on the
// host executor (the CUDA backend's code, src/device/OptimizerOps.h) give
// the CPU op's values bit for bit; sum of squares across the chunk
// boundary, the clip coefficient, the schedule's known values, and the
// argument checks.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/lr_schedule.h"
#include "moe_rt/ops.h"

#include "../src/device/OptimizerOps.h"
#include "CheckedExecutor.h"
#include "TestTensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

using moe_rt_test::fillRandom;
using moe_rt_test::Tensor;

struct OptimizerTest : moe_rt_test::CpuStreamTest {};

Tensor scalarF32(float v) {
  Tensor t({});
  t.f()[0] = v;
  return t;
}

Tensor scalarI64(int64_t v) {
  Tensor t({}, MOE_RT_I64);
  t.i()[0] = v;
  return t;
}

/// torch.optim.AdamW's per-tensor step, in float64 (torch 1.13).
struct TorchAdamW {
  std::vector<double> p, m, v;
  double beta1, beta2, eps, wd;
  void step(const std::vector<double> &grad, double lr, int t) {
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - lr * wd;                                 // param.mul_
      m[i] = m[i] * beta1 + grad[i] * (1 - beta1);         // exp_avg.lerp_
      v[i] = v[i] * beta2 + (1 - beta2) * grad[i] * grad[i]; // addcmul_
      double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
      double stepSize = lr / bc1;
      double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
      p[i] += -stepSize * m[i] / denom;                    // addcdiv_
    }
  }
};

TEST_F(OptimizerTest, AdamWEqualsTorchOverSteps) {
  const int64_t n = 37;
  Tensor param({n}), m({n}), v({n}), grad({n});
  fillRandom(param, 1);
  TorchAdamW ref{std::vector<double>(param.f(), param.f() + n),
                 std::vector<double>(n, 0.0), std::vector<double>(n, 0.0),
                 0.8, 0.95, 1e-6, 0.1};
  const float clip = 0.5f;
  for (int t = 1; t <= 4; ++t) {
    fillRandom(grad, 10 + t, 0.3f);
    double lr = 0.01 * t;
    Tensor lrT = scalarF32(float(lr)), stepT = scalarI64(t),
           scale = scalarF32(clip), np({n}), nm({n}), nv({n});
    ASSERT_EQ(moe_rt_adamw(s, 0.8, 0.95, 1e-6, 0.1, &lrT, &stepT, &scale,
                           &param, &grad, &m, &v, &np, &nm, &nv),
              MOE_RT_OK);
    ASSERT_EQ(sync(), MOE_RT_OK);
    std::vector<double> g(n);
    for (int64_t i = 0; i < n; ++i)
      g[i] = double(grad.f()[i]) * clip; // clip_grad_norm_ scales in place
    ref.step(g, double(float(lr)), t);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(np.f()[i], ref.p[i], 1e-6 * (1 + std::fabs(ref.p[i])))
          << "step " << t << " element " << i;
      EXPECT_NEAR(nm.f()[i], ref.m[i], 1e-7) << i;
      EXPECT_NEAR(nv.f()[i], ref.v[i], 1e-8) << i;
    }
    // The next step starts from the carried values, in float as the step
    // carries them.
    std::copy(np.f(), np.f() + n, param.f());
    std::copy(nm.f(), nm.f() + n, m.f());
    std::copy(nv.f(), nv.f() + n, v.f());
    for (int64_t i = 0; i < n; ++i) {
      ref.p[i] = np.f()[i];
      ref.m[i] = nm.f()[i];
      ref.v[i] = nv.f()[i];
    }
  }
}

TEST_F(OptimizerTest, SgdMomentumEqualsTorchOverSteps) {
  const int64_t n = 20;
  Tensor param({n}), buf({n}), grad({n});
  fillRandom(param, 2);
  std::vector<double> p(param.f(), param.f() + n), b(n, 0.0);
  for (int t = 1; t <= 3; ++t) {
    fillRandom(grad, 20 + t);
    Tensor lrT = scalarF32(0.05f), np({n}), nb({n});
    ASSERT_EQ(moe_rt_sgd_momentum(s, 0.9, 0.01, &lrT, nullptr, &param, &grad,
                                  &buf, &np, &nb),
              MOE_RT_OK);
    ASSERT_EQ(sync(), MOE_RT_OK);
    for (int64_t i = 0; i < n; ++i) {
      double d = grad.f()[i] + 0.01 * p[i];           // d_p.add(param, wd)
      b[i] = t == 1 ? d : 0.9 * b[i] + d;              // buf = clone / mul_.add_
      p[i] -= double(0.05f) * b[i];
      EXPECT_NEAR(np.f()[i], p[i], 1e-6 * (1 + std::fabs(p[i]))) << t << i;
      EXPECT_NEAR(nb.f()[i], b[i], 1e-6 * (1 + std::fabs(b[i]))) << t << i;
      p[i] = np.f()[i];
      b[i] = nb.f()[i];
    }
    std::copy(np.f(), np.f() + n, param.f());
    std::copy(nb.f(), nb.f() + n, buf.f());
  }
}

TEST_F(OptimizerTest, HostExecutorRunsTheCpuOpsBodies) {
  // The CUDA backend's templates on the host give the CPU op's bits.
  const int64_t n = 9000; // more than two sum_squares chunks
  Tensor param({n}), grad({n}), m({n}), v({n});
  fillRandom(param, 3);
  fillRandom(grad, 4);
  fillRandom(m, 5, 0.1f);
  for (int64_t i = 0; i < n; ++i)
    v.f()[i] = std::fabs(grad.f()[i]) * 0.01f;
  Tensor lrT = scalarF32(0.003f), stepT = scalarI64(7), np({n}), nm({n}),
         nv({n}), sq = scalarF32(0);
  ASSERT_EQ(moe_rt_adamw(s, 0.9, 0.999, 1e-8, 0.01, &lrT, &stepT, nullptr,
                         &param, &grad, &m, &v, &np, &nm, &nv),
            MOE_RT_OK);
  ASSERT_EQ(moe_rt_sum_squares(s, &grad, 0, &sq), MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);

  moe_rt_test::CheckedExecutor ex;
  std::vector<float> hp(n), hm(n), hv(n);
  moe_rt::device::optim::AdamWBody body{
      param.f(), grad.f(), m.f(), v.f(), lrT.f(), nullptr, stepT.i(),
      0.9,       0.999,    1e-8,  0.01,  hp.data(), hm.data(), hv.data()};
  ASSERT_EQ(moe_rt::device::adamw(ex, n, body), MOE_RT_OK);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(hp[i], np.f()[i]) << i;
    ASSERT_EQ(hm[i], nm.f()[i]) << i;
    ASSERT_EQ(hv[i], nv.f()[i]) << i;
  }
  float hsq = 0;
  ASSERT_EQ(moe_rt::device::sumSquares(ex, n, grad.f(), false, &hsq),
            MOE_RT_OK);
  EXPECT_EQ(hsq, sq.f()[0]);
  double want = 0;
  for (int64_t i = 0; i < n; ++i)
    want += double(grad.f()[i]) * grad.f()[i];
  EXPECT_NEAR(sq.f()[0], want, 1e-6 * want);
}

TEST_F(OptimizerTest, HostExecutorRunsSgdMomentumAndClipBodies) {
  // The CUDA backend's SGD-momentum and clip-coefficient templates on the
  // host give the CPU ops' bits, with the clip scale applied (a norm over
  // max_norm, so the coefficient is < 1 and every update uses it).
  const int64_t n = 5000;
  Tensor param({n}), grad({n}), buf({n});
  fillRandom(param, 6);
  fillRandom(grad, 7);
  fillRandom(buf, 8, 0.1f);
  Tensor lrT = scalarF32(0.05f), sq = scalarF32(0), coef = scalarF32(0),
         np({n}), nb({n});
  ASSERT_EQ(moe_rt_sum_squares(s, &grad, 0, &sq), MOE_RT_OK);
  ASSERT_EQ(moe_rt_clip_coef(s, &sq, 0.5, &coef), MOE_RT_OK);
  ASSERT_EQ(moe_rt_sgd_momentum(s, 0.9, 0.01, &lrT, &coef, &param, &grad,
                                &buf, &np, &nb),
            MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  ASSERT_LT(coef.f()[0], 1.0f);

  moe_rt_test::CheckedExecutor ex;
  float hcoef = 0;
  ASSERT_EQ(moe_rt::device::clipCoef(ex, sq.f(), 0.5, &hcoef), MOE_RT_OK);
  EXPECT_EQ(hcoef, coef.f()[0]);
  std::vector<float> hp(n), hb(n);
  moe_rt::device::optim::SgdMomentumBody body{
      param.f(), grad.f(), buf.f(), lrT.f(), &hcoef,
      0.9,       0.01,     hp.data(), hb.data()};
  ASSERT_EQ(moe_rt::device::sgdMomentum(ex, n, body), MOE_RT_OK);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(hp[i], np.f()[i]) << i;
    ASSERT_EQ(hb[i], nb.f()[i]) << i;
  }
  // The scale is used: without it the update differs.
  body.scale = nullptr;
  ASSERT_EQ(moe_rt::device::sgdMomentum(ex, n, body), MOE_RT_OK);
  EXPECT_NE(hb[0], nb.f()[0]);
}

TEST_F(OptimizerTest, SumSquaresAccumulatesAndClipCoefClamps) {
  Tensor a({3}, {1, 2, 2}), b({2}, {0, 3}), sq = scalarF32(123), coef({}),
      max1 = scalarF32(0), coef2({});
  ASSERT_EQ(moe_rt_sum_squares(s, &a, 0, &sq), MOE_RT_OK); // overwrites 123
  ASSERT_EQ(moe_rt_sum_squares(s, &b, 1, &sq), MOE_RT_OK);
  ASSERT_EQ(moe_rt_clip_coef(s, &sq, 2.0, &coef), MOE_RT_OK);
  ASSERT_EQ(moe_rt_clip_coef(s, &sq, 100.0, &coef2), MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  EXPECT_FLOAT_EQ(sq.f()[0], 18); // 1 + 4 + 4 + 0 + 9
  EXPECT_FLOAT_EQ(coef.f()[0], float(2.0 / (std::sqrt(18.0) + 1e-6)));
  EXPECT_EQ(coef2.f()[0], 1.0f); // never scales up
  EXPECT_EQ(moe_rt_clip_coef(s, &sq, 0.0, &coef), MOE_RT_INVALID_ARGUMENT);
}

TEST_F(OptimizerTest, BadOperandsAreRefused) {
  Tensor p({4}), g({4}), m({4}), v({4}), short3({3}), o1({4}), o2({4}),
      o3({4});
  Tensor lr = scalarF32(0.1f), step = scalarI64(1), stepF = scalarF32(1);
  EXPECT_EQ(moe_rt_adamw(s, 0.9, 0.999, 1e-8, 0, &lr, &step, nullptr, &p,
                         &short3, &m, &v, &o1, &o2, &o3),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_adamw(s, 0.9, 0.999, 1e-8, 0, &lr, &stepF, nullptr, &p,
                         &g, &m, &v, &o1, &o2, &o3),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_adamw(s, 1.0, 0.999, 1e-8, 0, &lr, &step, nullptr, &p, &g,
                         &m, &v, &o1, &o2, &o3),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_adamw(s, 0.9, 0.999, 0, 0, &lr, &step, nullptr, &p, &g,
                         &m, &v, &o1, &o2, &o3),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_sgd_momentum(s, 0.9, 0, &p, nullptr, &p, &g, &m, &o1, &o2),
            MOE_RT_INVALID_ARGUMENT); // lr must be a scalar
  EXPECT_EQ(moe_rt_sum_squares(s, &p, 0, &o1), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(sync(), MOE_RT_OK);
}

TEST(LrSchedule, KnownValues) {
  moe_rt_lr_schedule constant{MOE_RT_LR_CONSTANT, 0.1, 0, 0, 0};
  EXPECT_EQ(moe_rt_lr_at(&constant, 1), 0.1);
  EXPECT_EQ(moe_rt_lr_at(&constant, 1000), 0.1);
  // Warm-up over 4 updates, cosine to 0.01 at update 14.
  moe_rt_lr_schedule cosine{MOE_RT_LR_COSINE, 1.0, 0.01, 4, 14};
  EXPECT_DOUBLE_EQ(moe_rt_lr_at(&cosine, 1), 0.25);
  EXPECT_DOUBLE_EQ(moe_rt_lr_at(&cosine, 4), 1.0);
  EXPECT_DOUBLE_EQ(moe_rt_lr_at(&cosine, 9), 0.01 + 0.99 * 0.5); // halfway
  EXPECT_DOUBLE_EQ(moe_rt_lr_at(&cosine, 14), 0.01);
  EXPECT_DOUBLE_EQ(moe_rt_lr_at(&cosine, 50), 0.01);
}

} // namespace
