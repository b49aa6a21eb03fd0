//===- DeviceShardTest.cpp - the axis collectives' layout, run on the host ===//
//
// moe_rt_all_gather_axis / moe_rt_reduce_scatter_axis run the group's
// rank-major collective with device/ShardLayout.h's layout change around
// it, on the CPU and (the same bodies) on a GPU. Here the bodies run on the
// HostExecutor for G simulated ranks, the collectives simulated in memory
// (all-gather: the ranks' buffers one after the other; reduce-scatter: part
// r of the sum), against the ops' definitions by brute force: gather rank
// g's rows at [g d, (g + 1) d) of the axis; reduce-scatter rank r's rows
// of every rank's input, summed.
//
//===----------------------------------------------------------------------===//

#include "HostExecutor.h"

#include "../src/device/ShardLayout.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace {

using moe_rt::device::AxisShape;
using moe_rt::device::HostExecutor;

std::vector<float> randomVec(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(rng);
  return v;
}

struct ShardCase {
  AxisShape a;
};

class DeviceShard : public ::testing::TestWithParam<ShardCase> {};

TEST_P(DeviceShard, AllGatherPutsRankGAtItsRowsOfTheAxis) {
  AxisShape a = GetParam().a;
  int64_t partSize = a.outer * a.part * a.inner;
  std::vector<std::vector<float>> in;
  std::vector<float> rankMajor; // what the group's all-gather delivers
  for (int64_t g = 0; g < a.group; ++g) {
    in.push_back(randomVec(partSize, 11 + g));
    rankMajor.insert(rankMajor.end(), in[g].begin(), in[g].end());
  }
  std::vector<float> out(a.gatheredSize(), -7.0f);
  HostExecutor ex;
  ASSERT_EQ(moe_rt::device::rankMajorToAxis(ex, a, rankMajor.data(),
                                            out.data()),
            MOE_RT_OK);
  for (int64_t o = 0; o < a.outer; ++o)
    for (int64_t g = 0; g < a.group; ++g)
      for (int64_t p = 0; p < a.part; ++p)
        for (int64_t c = 0; c < a.inner; ++c)
          ASSERT_EQ(out[(o * a.group * a.part + g * a.part + p) * a.inner + c],
                    in[g][(o * a.part + p) * a.inner + c])
              << "outer " << o << " rank " << g << " row " << p;
}

TEST_P(DeviceShard, ReduceScatterSumsRankRsRowsOfEveryInput) {
  AxisShape a = GetParam().a;
  int64_t partSize = a.outer * a.part * a.inner;
  std::vector<std::vector<float>> in, sent;
  HostExecutor ex;
  for (int64_t g = 0; g < a.group; ++g) {
    in.push_back(randomVec(a.gatheredSize(), 29 + g));
    sent.emplace_back(a.gatheredSize(), -7.0f);
    ASSERT_EQ(moe_rt::device::axisToRankMajor(ex, a, in[g].data(),
                                              sent[g].data()),
              MOE_RT_OK);
  }
  for (int64_t r = 0; r < a.group; ++r) {
    // The group's reduce-scatter: part r of the rank-major buffers, summed.
    std::vector<float> out(partSize, 0.0f);
    for (int64_t g = 0; g < a.group; ++g)
      for (int64_t i = 0; i < partSize; ++i)
        out[i] += sent[g][r * partSize + i];
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t p = 0; p < a.part; ++p)
        for (int64_t c = 0; c < a.inner; ++c) {
          float expected = 0.0f;
          for (int64_t g = 0; g < a.group; ++g)
            expected +=
                in[g][(o * a.group * a.part + r * a.part + p) * a.inner + c];
          ASSERT_EQ(out[(o * a.part + p) * a.inner + c], expected)
              << "rank " << r << " outer " << o << " row " << p;
        }
  }
}

// ESP's shapes: E_l experts (outer) x slots (the axis) x M; a 2-D case
// with the axis last; a group of one.
INSTANTIATE_TEST_SUITE_P(Shapes, DeviceShard,
                         ::testing::Values(ShardCase{{2, 3, 4, 5}},
                                           ShardCase{{4, 2, 3, 8}},
                                           ShardCase{{3, 5, 2, 1}},
                                           ShardCase{{1, 2, 3, 4}}));

} // namespace
