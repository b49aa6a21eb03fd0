//===- CudaTest.cpp - the CUDA backend, with or without a device ----------===//
//
// CI machines build the CUDA backend but have no GPU: there the tests check
// that the libraries are linked and that every CUDA entry point reports
// MOE_RT_UNAVAILABLE with a reason. On a machine with a device they run the
// stream, event and scale-kernel path for real.

#include "moe_rt/moe_rt.h"
#include "moe_rt/collectives.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

/// This process's memory map (which shared objects are loaded).
std::string processMaps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

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

// The backend is a module opened on first use (src/cuda/CudaModule.h): once
// a CUDA entry point was called, it and cudart are mapped. (That a CPU run
// maps neither is checked on a fresh moe-run process by
// test/Tools/moe-run-no-cuda-libs.test.)
TEST(Cuda, BackendModuleIsLoadedOnFirstUse) {
  moe_rt_cuda_device_count();
  std::string maps = processMaps();
  EXPECT_NE(maps.find("libmoe_runtime_cuda.so"), std::string::npos);
  EXPECT_NE(maps.find("libcudart.so"), std::string::npos);
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

TEST(Cuda, WithoutADevicePoolAndCopySayWhy) {
  if (moe_rt_cuda_device_count() > 0)
    GTEST_SKIP() << "a CUDA device is present";
  moe_rt_stream pool = nullptr;
  EXPECT_EQ(moe_rt_stream_create_pool_on(MOE_RT_CUDA, &pool),
            MOE_RT_UNAVAILABLE);
  EXPECT_EQ(pool, nullptr);
  float host[2] = {1, 2}, fake[2] = {0, 0};
  moe_rt_tensor src{}, dst{};
  src.data = host;
  dst.data = fake;
  src.rank = dst.rank = 1;
  src.shape[0] = dst.shape[0] = 2;
  src.dtype = dst.dtype = MOE_RT_F32;
  src.backend = MOE_RT_CPU;
  dst.backend = MOE_RT_CUDA;
  EXPECT_EQ(moe_rt_tensor_copy(&dst, &src), MOE_RT_UNAVAILABLE);
  EXPECT_NE(std::string(moe_rt_last_error()).find("CUDA"), std::string::npos);
}

/// Host values -> device -> host through moe_rt_tensor_copy.
std::vector<float> roundTrip(const moe_rt_tensor &device) {
  std::vector<float> out(size_t(moe_rt_tensor_numel(&device)));
  moe_rt_tensor host = device;
  host.data = out.data();
  host.backend = MOE_RT_CPU;
  EXPECT_EQ(moe_rt_tensor_copy(&host, &device), MOE_RT_OK)
      << moe_rt_last_error();
  return out;
}

TEST(Cuda, CopiesBetweenHostAndDevice) {
  if (moe_rt_cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device on this machine";
  ASSERT_EQ(moe_rt_cuda_select_device(0), MOE_RT_OK) << moe_rt_last_error();
  int64_t shape[2] = {3, 5};
  moe_rt_tensor a, b;
  ASSERT_EQ(moe_rt_tensor_create(MOE_RT_CUDA, MOE_RT_F32, 2, shape, &a),
            MOE_RT_OK);
  ASSERT_EQ(moe_rt_tensor_create(MOE_RT_CUDA, MOE_RT_F32, 2, shape, &b),
            MOE_RT_OK);
  std::vector<float> values(15);
  for (int i = 0; i < 15; ++i)
    values[i] = 0.5f * float(i) - 3.0f;
  moe_rt_tensor host = a;
  host.data = values.data();
  host.backend = MOE_RT_CPU;
  ASSERT_EQ(moe_rt_tensor_copy(&a, &host), MOE_RT_OK) << moe_rt_last_error();
  ASSERT_EQ(moe_rt_tensor_copy(&b, &a), MOE_RT_OK) << moe_rt_last_error();
  EXPECT_EQ(roundTrip(b), values);
  // A created device tensor starts zero-filled.
  moe_rt_tensor z;
  ASSERT_EQ(moe_rt_tensor_create(MOE_RT_CUDA, MOE_RT_F32, 2, shape, &z),
            MOE_RT_OK);
  EXPECT_EQ(roundTrip(z), std::vector<float>(15, 0.0f));
  moe_rt_tensor wrong = a;
  wrong.dtype = MOE_RT_I32;
  EXPECT_EQ(moe_rt_tensor_copy(&wrong, &a), MOE_RT_INVALID_ARGUMENT);
  moe_rt_tensor_destroy(&a);
  moe_rt_tensor_destroy(&b);
  moe_rt_tensor_destroy(&z);
}

TEST(Cuda, PoolRecordsAfterBothStreamsAndWaitsGateBoth) {
  if (moe_rt_cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device on this machine";
  moe_rt_stream compute, pool;
  moe_rt_event before, after;
  ASSERT_EQ(moe_rt_stream_create(MOE_RT_CUDA, &compute), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_create_pool_on(MOE_RT_CUDA, &pool), MOE_RT_OK)
      << moe_rt_last_error();
  ASSERT_EQ(moe_rt_event_create(MOE_RT_CUDA, &before), MOE_RT_OK);
  ASSERT_EQ(moe_rt_event_create(MOE_RT_CUDA, &after), MOE_RT_OK);
  // A host task is refused on a CUDA pool, low priority or not.
  EXPECT_EQ(moe_rt_stream_enqueue_low(
                pool, [](void *) { return 0; }, nullptr),
            MOE_RT_INVALID_ARGUMENT);
  int64_t shape[1] = {1 << 22};
  moe_rt_tensor t;
  ASSERT_EQ(moe_rt_tensor_create(MOE_RT_CUDA, MOE_RT_F32, 1, shape, &t),
            MOE_RT_OK);
  std::vector<float> ones(size_t(shape[0]), 1.0f);
  moe_rt_tensor host = t;
  host.data = ones.data();
  host.backend = MOE_RT_CPU;
  ASSERT_EQ(moe_rt_tensor_copy(&t, &host), MOE_RT_OK);
  // compute: x4, then the pool (gated on it) x0.5 many times; an event
  // recorded on the pool completes only after that work; compute waits on
  // it and scales x3. Wrong ordering gives another value than 4*0.5^8*3.
  ASSERT_EQ(moe_rt_tensor_scale(compute, &t, 4.0f), MOE_RT_OK);
  ASSERT_EQ(moe_rt_event_record(before, compute), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_wait_event(pool, before, 10.0), MOE_RT_OK);
  for (int i = 0; i < 8; ++i)
    ASSERT_EQ(moe_rt_tensor_scale(pool, &t, 0.5f), MOE_RT_OK);
  ASSERT_EQ(moe_rt_event_record(after, pool), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_wait_event(compute, after, 10.0), MOE_RT_OK);
  ASSERT_EQ(moe_rt_tensor_scale(compute, &t, 3.0f), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(compute, 30.0), MOE_RT_OK)
      << moe_rt_last_error();
  ASSERT_EQ(moe_rt_stream_synchronize(pool, 30.0), MOE_RT_OK)
      << moe_rt_last_error();
  EXPECT_EQ(moe_rt_event_query(after), 1);
  std::vector<float> got = roundTrip(t);
  const float want = 4.0f * 3.0f / 256.0f;
  EXPECT_EQ(got.front(), want);
  EXPECT_EQ(got.back(), want);
  moe_rt_tensor_destroy(&t);
  moe_rt_event_destroy(before);
  moe_rt_event_destroy(after);
  moe_rt_stream_destroy(compute);
  moe_rt_stream_destroy(pool);
}

} // namespace

