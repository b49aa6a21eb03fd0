//===- ShardLayout.h - a gather axis <-> the collectives' rank-major order ===//
//
// shard.all_gather / shard.reduce_scatter along an axis (FSMoE's ESP
// all-gather of the dispatched tokens and reduce-scatter of the experts'
// partial sums, docs/passes/moe-expert-sharding.md) run over the group's
// plain collectives, which concatenate / split dimension 0 by rank. A rank's
// part is the tensor viewed as [outer, part, inner] around the axis; the
// gathered tensor is [outer, group * part, inner] with rank g's part at
// rows [g * part, (g + 1) * part) of the axis. These bodies convert between
// that layout and the collectives' rank-major buffer [group, outer, part,
// inner]: the CPU backend (src/api/ShardOps.cpp) and the CUDA one
// (src/cuda/CudaShardOps.cu) run the same bodies.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_DEVICE_SHARDLAYOUT_H
#define MOE_RT_SRC_DEVICE_SHARDLAYOUT_H

#include "Device.h"

#include "moe_rt/moe_rt.h"

#include <cstdint>

namespace moe_rt::device {

/// One rank's part viewed around the gather axis, and the group's size.
struct AxisShape {
  int64_t group, outer, part, inner;
  int64_t gatheredSize() const { return group * outer * part * inner; }
};

/// dst (axis layout, [outer, group * part, inner]) = src (rank-major).
struct RankMajorToAxis {
  AxisShape a;
  const float *src;
  float *dst;
  MOE_HD void operator()(int64_t i) const {
    int64_t c = i % a.inner, row = (i / a.inner) % (a.group * a.part),
            o = i / (a.inner * a.group * a.part);
    int64_t g = row / a.part, p = row % a.part;
    dst[i] = src[((g * a.outer + o) * a.part + p) * a.inner + c];
  }
};

/// dst (rank-major, [group, outer, part, inner]) = src (axis layout).
struct AxisToRankMajor {
  AxisShape a;
  const float *src;
  float *dst;
  MOE_HD void operator()(int64_t i) const {
    int64_t c = i % a.inner, p = (i / a.inner) % a.part,
            o = (i / (a.inner * a.part)) % a.outer,
            g = i / (a.inner * a.part * a.outer);
    dst[i] = src[(o * a.group * a.part + g * a.part + p) * a.inner + c];
  }
};

template <class X>
moe_rt_status rankMajorToAxis(X &ex, const AxisShape &a, const float *src,
                              float *dst) {
  return ex.forEach(a.gatheredSize(), RankMajorToAxis{a, src, dst});
}

template <class X>
moe_rt_status axisToRankMajor(X &ex, const AxisShape &a, const float *src,
                              float *dst) {
  return ex.forEach(a.gatheredSize(), AxisToRankMajor{a, src, dst});
}

} // namespace moe_rt::device

#endif // MOE_RT_SRC_DEVICE_SHARDLAYOUT_H
