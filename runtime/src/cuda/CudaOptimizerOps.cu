//===- CudaOptimizerOps.cu - optimizer ops on a CUDA stream ---------------===//
//
// One CudaExecutor per call, then the template of src/device (all numerics
// live there and are checked on the host by runtime/tests/OptimizerTest).
//
//===----------------------------------------------------------------------===//

#include "CudaOptimizerOps.h"

#include "CudaExecutor.h"

namespace moe_rt::cuda {

using device::CudaExecutor;

moe_rt_status adamw(moe_rt_stream s, int64_t n,
                    const device::optim::AdamWBody &body) {
  CudaExecutor ex(s);
  device::adamw(ex, n, body);
  return ex.status();
}

moe_rt_status sgdMomentum(moe_rt_stream s, int64_t n,
                          const device::optim::SgdMomentumBody &body) {
  CudaExecutor ex(s);
  device::sgdMomentum(ex, n, body);
  return ex.status();
}

moe_rt_status sumSquares(moe_rt_stream s, int64_t n, const float *x,
                         bool accumulate, float *out) {
  CudaExecutor ex(s);
  device::sumSquares(ex, n, x, accumulate, out);
  return ex.status();
}

moe_rt_status clipCoef(moe_rt_stream s, const float *sumSq, double maxNorm,
                       float *out) {
  CudaExecutor ex(s);
  device::clipCoef(ex, sumSq, maxNorm, out);
  return ex.status();
}

} // namespace moe_rt::cuda
