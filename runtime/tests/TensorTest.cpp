//===- TensorTest.cpp - tensors and tensor ops on the CPU backend ---------===//

#include "moe_rt/moe_rt.h"

#include <gtest/gtest.h>

#include <string>

namespace {

TEST(Tensor, AllocatesZeroFilled) {
  int64_t shape[3] = {2, 3, 4};
  moe_rt_tensor t;
  ASSERT_EQ(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 3, shape, &t),
            MOE_RT_OK);
  EXPECT_EQ(moe_rt_tensor_numel(&t), 24);
  auto *data = static_cast<float *>(t.data);
  for (int i = 0; i < 24; ++i)
    EXPECT_EQ(data[i], 0.0f);
  EXPECT_EQ(moe_rt_tensor_destroy(&t), MOE_RT_OK);
  EXPECT_EQ(t.data, nullptr);
}

TEST(Tensor, ScalarAndEmpty) {
  moe_rt_tensor scalar, empty;
  ASSERT_EQ(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_I64, 0, nullptr, &scalar),
            MOE_RT_OK);
  EXPECT_EQ(moe_rt_tensor_numel(&scalar), 1);
  int64_t zero[1] = {0};
  ASSERT_EQ(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 1, zero, &empty),
            MOE_RT_OK);
  EXPECT_EQ(moe_rt_tensor_numel(&empty), 0);
  moe_rt_tensor_destroy(&scalar);
  moe_rt_tensor_destroy(&empty);
}

TEST(Tensor, RejectsBadShapes) {
  moe_rt_tensor t;
  int64_t negative[2] = {2, -1};
  EXPECT_EQ(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 2, negative, &t),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_rt_last_error()).find("dimension 1 is negative"),
            std::string::npos);
  int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 9, shape, &t),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 2, nullptr, &t),
            MOE_RT_INVALID_ARGUMENT);
  int64_t huge[3] = {1LL << 40, 1LL << 40, 1LL << 40};
  EXPECT_EQ(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 3, huge, &t),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 0, nullptr, nullptr),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_tensor_destroy(nullptr), MOE_RT_INVALID_ARGUMENT);
}

// 1/R loss scaling (FlowMoE App. H) as a stream task.
TEST(Tensor, ScaleRunsOnTheStream) {
  int64_t shape[1] = {5};
  moe_rt_tensor t;
  ASSERT_EQ(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 1, shape, &t),
            MOE_RT_OK);
  auto *data = static_cast<float *>(t.data);
  for (int i = 0; i < 5; ++i)
    data[i] = float(i + 1);
  moe_rt_stream s;
  ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &s), MOE_RT_OK);
  ASSERT_EQ(moe_rt_tensor_scale(s, &t, 0.25f), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(s, 10.0), MOE_RT_OK);
  for (int i = 0; i < 5; ++i)
    EXPECT_FLOAT_EQ(data[i], (i + 1) * 0.25f);

  moe_rt_tensor ints;
  ASSERT_EQ(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_I32, 1, shape, &ints),
            MOE_RT_OK);
  EXPECT_EQ(moe_rt_tensor_scale(s, &ints, 2.0f), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_tensor_scale(nullptr, &t, 2.0f), MOE_RT_INVALID_ARGUMENT);
  moe_rt_stream_destroy(s);
  moe_rt_tensor_destroy(&t);
  moe_rt_tensor_destroy(&ints);
}

} // namespace
