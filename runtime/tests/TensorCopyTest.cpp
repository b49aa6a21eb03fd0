//===- TensorCopyTest.cpp - moe_rt_tensor_copy and the pool on a backend --===//
//
// What runs without a GPU: host-to-host copies with concrete values, the
// refusals, and the CUDA entry points answering MOE_RT_UNAVAILABLE with a
// reason (the device paths run in CudaTest.cpp where a GPU exists).

#include "moe_rt/moe_rt.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

moe_rt_tensor view(void *data, moe_rt_dtype dtype, std::vector<int64_t> shape,
                   moe_rt_backend backend = MOE_RT_CPU) {
  moe_rt_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.backend = backend;
  t.rank = int32_t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i)
    t.shape[i] = shape[i];
  return t;
}

TEST(TensorCopy, HostToHostCopiesEveryValueAcrossShapes) {
  std::vector<float> src = {1.5f, -2, 3, 4.25f, 5, 6}, dst(6, 0);
  moe_rt_tensor s = view(src.data(), MOE_RT_F32, {2, 3});
  moe_rt_tensor d = view(dst.data(), MOE_RT_F32, {6}); // same numel
  ASSERT_EQ(moe_rt_tensor_copy(&d, &s), MOE_RT_OK) << moe_rt_last_error();
  EXPECT_EQ(dst, src);

  std::vector<int64_t> ids = {7, -1, int64_t(1) << 40}, out(3, 0);
  moe_rt_tensor si = view(ids.data(), MOE_RT_I64, {3});
  moe_rt_tensor di = view(out.data(), MOE_RT_I64, {3});
  ASSERT_EQ(moe_rt_tensor_copy(&di, &si), MOE_RT_OK);
  EXPECT_EQ(out, ids);
}

TEST(TensorCopy, CreatedTensorsRoundTrip) {
  int64_t shape[2] = {3, 4};
  moe_rt_tensor a, b;
  ASSERT_EQ(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 2, shape, &a),
            MOE_RT_OK);
  ASSERT_EQ(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 2, shape, &b),
            MOE_RT_OK);
  for (int i = 0; i < 12; ++i)
    static_cast<float *>(a.data)[i] = float(i * i) - 3;
  ASSERT_EQ(moe_rt_tensor_copy(&b, &a), MOE_RT_OK);
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(static_cast<float *>(b.data)[i], float(i * i) - 3) << i;
  moe_rt_tensor_destroy(&a);
  moe_rt_tensor_destroy(&b);
}

TEST(TensorCopy, RefusesMismatchedDtypeOrSize) {
  std::vector<float> f(4, 1);
  std::vector<int32_t> i32(4, 0);
  std::vector<float> g(5, 0);
  moe_rt_tensor src = view(f.data(), MOE_RT_F32, {4});
  moe_rt_tensor wrongType = view(i32.data(), MOE_RT_I32, {4});
  EXPECT_EQ(moe_rt_tensor_copy(&wrongType, &src), MOE_RT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_rt_last_error()).find("dtypes differ"),
            std::string::npos)
      << moe_rt_last_error();
  EXPECT_EQ(i32, std::vector<int32_t>(4, 0)) << "nothing copied";

  moe_rt_tensor wrongSize = view(g.data(), MOE_RT_F32, {5});
  EXPECT_EQ(moe_rt_tensor_copy(&wrongSize, &src), MOE_RT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_rt_last_error()).find("dst has 5 elements, src 4"),
            std::string::npos)
      << moe_rt_last_error();

  moe_rt_tensor badDtype = view(f.data(), moe_rt_dtype(42), {4});
  moe_rt_tensor badDtype2 = view(g.data(), moe_rt_dtype(42), {4});
  EXPECT_EQ(moe_rt_tensor_copy(&badDtype2, &badDtype),
            MOE_RT_INVALID_ARGUMENT);
  moe_rt_tensor badBackend = view(g.data(), MOE_RT_F32, {4});
  badBackend.backend = moe_rt_backend(7);
  EXPECT_EQ(moe_rt_tensor_copy(&badBackend, &src), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_tensor_copy(nullptr, &src), MOE_RT_INVALID_ARGUMENT);
  moe_rt_tensor noData = view(nullptr, MOE_RT_F32, {4});
  EXPECT_EQ(moe_rt_tensor_copy(&noData, &src), MOE_RT_INVALID_ARGUMENT);
}

TEST(TensorCopy, CudaWithoutADeviceIsUnavailableWithAReason) {
  if (moe_rt_cuda_device_count() > 0)
    GTEST_SKIP() << "a CUDA device is present (CudaTest.cpp copies for real)";
  std::vector<float> host(4, 2), other(4, 0);
  moe_rt_tensor src = view(host.data(), MOE_RT_F32, {4});
  // A tensor that claims device memory: no device can back it here.
  moe_rt_tensor dev = view(other.data(), MOE_RT_F32, {4}, MOE_RT_CUDA);
  EXPECT_EQ(moe_rt_tensor_copy(&dev, &src), MOE_RT_UNAVAILABLE);
  std::string why = moe_rt_last_error();
  EXPECT_NE(why.find("moe_rt_tensor_copy"), std::string::npos) << why;
  EXPECT_NE(why.find("CUDA"), std::string::npos) << why;
  EXPECT_EQ(moe_rt_tensor_copy(&src, &dev), MOE_RT_UNAVAILABLE);
  EXPECT_EQ(other, std::vector<float>(4, 0));
  EXPECT_EQ(moe_rt_cuda_select_device(0), MOE_RT_UNAVAILABLE);
  EXPECT_EQ(moe_rt_cuda_select_device(-1),
            moe_rt_cuda_compiled() ? MOE_RT_INVALID_ARGUMENT
                                   : MOE_RT_UNAVAILABLE);
}

TEST(PoolOnBackend, CpuIsTheCpuPool) {
  moe_rt_stream pool = nullptr;
  ASSERT_EQ(moe_rt_stream_create_pool_on(MOE_RT_CPU, &pool), MOE_RT_OK);
  // The CPU pool takes low-priority host tasks (a CUDA pool does not).
  static int ran;
  ran = 0;
  ASSERT_EQ(moe_rt_stream_enqueue_low(
                pool, [](void *) { return ++ran, 0; }, nullptr),
            MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(pool, 10), MOE_RT_OK);
  EXPECT_EQ(ran, 1);
  moe_rt_stream_destroy(pool);
}

TEST(PoolOnBackend, CudaWithoutADeviceIsUnavailable) {
  if (moe_rt_cuda_device_count() > 0)
    GTEST_SKIP() << "a CUDA device is present";
  moe_rt_stream pool = reinterpret_cast<moe_rt_stream>(0x1);
  EXPECT_EQ(moe_rt_stream_create_pool_on(MOE_RT_CUDA, &pool),
            MOE_RT_UNAVAILABLE);
  EXPECT_EQ(pool, nullptr);
  std::string why = moe_rt_last_error();
  EXPECT_NE(why.find("moe_rt_stream_create_pool_on"), std::string::npos)
      << why;
  EXPECT_NE(why.find("CUDA"), std::string::npos) << why;
  EXPECT_EQ(moe_rt_stream_create_pool_on(moe_rt_backend(9), &pool),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(moe_rt_stream_create_pool_on(MOE_RT_CUDA, nullptr),
            MOE_RT_INVALID_ARGUMENT);
}

} // namespace
