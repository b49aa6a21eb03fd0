//===- TestTensor.h - a CPU moe_rt_tensor that frees itself -----*- C++ -*-===//
//
// Shared by the op tests (OpsTest.cpp, GateKindsTest.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_TESTS_TESTTENSOR_H
#define MOE_RT_TESTS_TESTTENSOR_H

#include "moe_rt/moe_rt.h"

#include <gtest/gtest.h>

#include <algorithm>
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

} // namespace moe_rt_test

#endif // MOE_RT_TESTS_TESTTENSOR_H
