//===- CpuOptimizerOps.cpp - optimizer ops as host tasks ------------------===//
//
// LoopExecutor is the smallest executor of src/device/Device.h that the
// optimizer templates need (forEach, scratch, status): bodies run in index
// order inside the stream's host task.
//
//===----------------------------------------------------------------------===//

#include "CpuOptimizerOps.h"

#include "CpuTasks.h"

#include <vector>

namespace moe_rt::cpu {
namespace {

class LoopExecutor {
public:
  template <class Body> moe_rt_status forEach(int64_t n, const Body &body) {
    for (int64_t i = 0; i < n; ++i)
      body(i);
    return MOE_RT_OK;
  }
  float *scratchF32(int64_t n) {
    scratch.emplace_back(static_cast<size_t>(n), 0.0f);
    return scratch.back().data();
  }
  moe_rt_status status() const { return MOE_RT_OK; }

private:
  // Element type double keeps the storage 8-byte aligned for the templates
  // that keep doubles in their F32 scratch.
  struct Storage {
    std::vector<double> words;
    Storage(size_t floats, float) : words((floats + 1) / 2, 0.0) {}
    float *data() { return reinterpret_cast<float *>(words.data()); }
  };
  std::vector<Storage> scratch;
};

} // namespace

moe_rt_status adamw(moe_rt_stream s, int64_t n,
                    const device::optim::AdamWBody &body) {
  return task(s, [=] {
    LoopExecutor x;
    device::adamw(x, n, body);
  });
}

moe_rt_status sgdMomentum(moe_rt_stream s, int64_t n,
                          const device::optim::SgdMomentumBody &body) {
  return task(s, [=] {
    LoopExecutor x;
    device::sgdMomentum(x, n, body);
  });
}

moe_rt_status sumSquares(moe_rt_stream s, int64_t n, const float *in,
                         bool accumulate, float *out) {
  return task(s, [=] {
    LoopExecutor x;
    device::sumSquares(x, n, in, accumulate, out);
  });
}

moe_rt_status clipCoef(moe_rt_stream s, const float *sumSq, double maxNorm,
                       float *out) {
  return task(s, [=] {
    LoopExecutor x;
    device::clipCoef(x, sumSq, maxNorm, out);
  });
}

} // namespace moe_rt::cpu
