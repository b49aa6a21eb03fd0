//===- TestTensor.h - a CPU moe_rt_tensor that frees itself -----*- C++ -*-===//
//
// Shared by the op tests: a self-freeing CPU tensor, random fills, and a
// fixture holding one CPU stream.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_TESTS_TESTTENSOR_H
#define MOE_RT_TESTS_TESTTENSOR_H

#include "moe_rt/moe_rt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace moe_rt_test {

/// A CPU tensor that frees itself.
struct Tensor {
  moe_rt_tensor t{};
  Tensor(std::vector<int64_t> shape, moe_rt_dtype dtype = MOE_RT_F32) {
    EXPECT_EQ(moe_rt_tensor_create(MOE_RT_CPU, dtype, int32_t(shape.size()),
                                   shape.data(), &t),
              MOE_RT_OK);
  }
  Tensor(std::vector<int64_t> shape, std::vector<float> values)
      : Tensor(std::move(shape)) {
    EXPECT_EQ(values.size(), size_t(moe_rt_tensor_numel(&t)));
    std::copy(values.begin(), values.end(), f());
  }
  ~Tensor() { moe_rt_tensor_destroy(&t); }
  float *f() { return static_cast<float *>(t.data); }
  int64_t *i() { return static_cast<int64_t *>(t.data); }
  int64_t n() const { return moe_rt_tensor_numel(&t); }
  moe_rt_tensor *operator&() { return &t; }
};

/// Fills an F32 tensor with N(0, scale^2) values from `seed`.
inline void fillRandom(Tensor &t, unsigned seed, float scale = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, scale);
  for (int64_t i = 0; i < t.n(); ++i)
    t.f()[i] = d(rng);
}

/// n values N(0, scale^2) in double (for the kernels' gradient checks).
inline std::vector<double> randomDoubles(size_t n, std::mt19937 &rng,
                                         double scale = 1.0) {
  std::normal_distribution<double> d(0, scale);
  std::vector<double> v(n);
  for (double &x : v)
    x = d(rng);
  return v;
}

/// Central differences of `objective()` (a scalar of the op's outputs)
/// against `grad` at every element of `param`, skipping the points where a
/// +-h step changes `selection` (a routing op's indices: not differentiable
/// there). Returns how many points were checked, so that the caller can
/// require most of them to have been.
template <class Objective>
int checkCentralDifferences(Tensor &param, Tensor &grad, Tensor &selection,
                            Objective objective, const std::string &name,
                            float h = 1e-3f) {
  objective();
  std::vector<int64_t> before(selection.i(), selection.i() + selection.n());
  auto unchanged = [&] {
    return std::equal(before.begin(), before.end(), selection.i());
  };
  int checked = 0;
  for (int64_t i = 0; i < param.n(); ++i) {
    float keep = param.f()[i];
    param.f()[i] = keep + h;
    double plus = objective();
    bool same = unchanged();
    param.f()[i] = keep - h;
    double minus = objective();
    same &= unchanged();
    param.f()[i] = keep;
    if (!same)
      continue;
    ++checked;
    EXPECT_NEAR(grad.f()[i], (plus - minus) / (2 * h),
                1e-2 * (1 + std::fabs(grad.f()[i])))
        << name << "[" << i << "]";
  }
  return checked;
}

/// A test holding one CPU stream; sync() waits for it (10 s at most).
struct CpuStreamTest : ::testing::Test {
  moe_rt_stream s = nullptr;
  void SetUp() override {
    ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &s), MOE_RT_OK);
  }
  void TearDown() override { moe_rt_stream_destroy(s); }
  moe_rt_status sync() { return moe_rt_stream_synchronize(s, 10.0); }
};

} // namespace moe_rt_test

#endif // MOE_RT_TESTS_TESTTENSOR_H
