//===- CudaTest.cpp - the CUDA backend, with or without a device
//------------===//
//
// CI machines build the CUDA backend but have no GPU: there the tests check
// that the libraries are linked and that every CUDA entry point reports
// MOE_RT_UNAVAILABLE with a reason. On a machine with a device they run the
// stream, event and scale-kernel path for real.

#include "moe_rt/moe_rt.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

#ifdef MOE_RT_EXPECT_CUDA
TEST(Cuda, IsCompiledAndLinksNcclAndCublas) {
  EXPECT_EQ(moe_rt_cuda_compiled(), 1);
  int nccl = 0, cublas = 0;
  ASSERT_EQ(moe_rt_cuda_library_versions(&nccl, &cublas), MOE_RT_OK)
      << moe_rt_last_error();
  EXPECT_GT(nccl, 20000) << "NCCL 2.x encodes its version as 2xxyy";
  EXPECT_GT(cublas, 0);
  EXPECT_EQ(moe_rt_cuda_library_versions(nullptr, &cublas),
            MOE_RT_INVALID_ARGUMENT);
}
#else
TEST(Cuda, ReportsThatItWasNotBuilt) {
  EXPECT_EQ(moe_rt_cuda_compiled(), 0);
  int nccl, cublas;
  EXPECT_EQ(moe_rt_cuda_library_versions(&nccl, &cublas), MOE_RT_UNAVAILABLE);
}
#endif

TEST(Cuda, WithoutADeviceEveryEntryPointSaysWhy) {
  if (moe_rt_cuda_device_count() > 0)
    GTEST_SKIP() << "a CUDA device is present";
  moe_rt_stream s = nullptr;
  EXPECT_EQ(moe_rt_stream_create(MOE_RT_CUDA, &s), MOE_RT_UNAVAILABLE);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(std::string(moe_rt_last_error()).find("CUDA"), std::string::npos)
      << moe_rt_last_error();
  moe_rt_event e = nullptr;
  EXPECT_EQ(moe_rt_event_create(MOE_RT_CUDA, &e), MOE_RT_UNAVAILABLE);
  int64_t shape[1] = {4};
  moe_rt_tensor t;
  EXPECT_EQ(moe_rt_tensor_create(MOE_RT_CUDA, MOE_RT_F32, 1, shape, &t),
            MOE_RT_UNAVAILABLE);
}

TEST(Cuda, StreamsEventsAndScaleOnADevice) {
  if (moe_rt_cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device on this machine";
  moe_rt_stream compute, comm;
  moe_rt_event event;
  ASSERT_EQ(moe_rt_stream_create(MOE_RT_CUDA, &compute), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_create(MOE_RT_CUDA, &comm), MOE_RT_OK);
  ASSERT_EQ(moe_rt_event_create(MOE_RT_CUDA, &event), MOE_RT_OK);
  int64_t shape[1] = {1 << 20};
  moe_rt_tensor t;
  ASSERT_EQ(moe_rt_tensor_create(MOE_RT_CUDA, MOE_RT_F32, 1, shape, &t),
            MOE_RT_OK);
  ASSERT_EQ(moe_rt_tensor_scale(compute, &t, 0.5f), MOE_RT_OK);
  ASSERT_EQ(moe_rt_event_record(event, compute), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_wait_event(comm, event, 10.0), MOE_RT_OK);
  ASSERT_EQ(moe_rt_tensor_scale(comm, &t, 2.0f), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(comm, 30.0), MOE_RT_OK);
  EXPECT_EQ(moe_rt_event_query(event), 1);
  EXPECT_EQ(moe_rt_tensor_destroy(&t), MOE_RT_OK);
  moe_rt_event_destroy(event);
  moe_rt_stream_destroy(compute);
  moe_rt_stream_destroy(comm);
}

} // namespace
