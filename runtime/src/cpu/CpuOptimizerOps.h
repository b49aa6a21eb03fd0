//===- CpuOptimizerOps.h - optimizer ops on the CPU backend -----*- C++ -*-===//
//
// The CPU side of src/api/OptimizerOps.cpp: each queues one host task that
// runs src/device/OptimizerOps.h's template on a loop executor, so both
// backends execute the same bodies. Pointers are host pointers, sizes
// checked by the caller.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CPU_CPUOPTIMIZEROPS_H
#define MOE_RT_SRC_CPU_CPUOPTIMIZEROPS_H

#include "../device/OptimizerOps.h"

#include "moe_rt/moe_rt.h"

namespace moe_rt::cpu {

moe_rt_status adamw(moe_rt_stream s, int64_t n,
                    const device::optim::AdamWBody &body);
moe_rt_status sgdMomentum(moe_rt_stream s, int64_t n,
                          const device::optim::SgdMomentumBody &body);
moe_rt_status sumSquares(moe_rt_stream s, int64_t n, const float *x,
                         bool accumulate, float *out);
moe_rt_status clipCoef(moe_rt_stream s, const float *sumSq, double maxNorm,
                       float *out);

} // namespace moe_rt::cpu

#endif // MOE_RT_SRC_CPU_CPUOPTIMIZEROPS_H
