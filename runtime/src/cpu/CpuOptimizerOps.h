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

// adamw, sgdMomentum, sumSquares, clipCoef: one declaration set for
// both backends.
#include "../device/OptimizerEntryPoints.inc"

} // namespace moe_rt::cpu

#endif // MOE_RT_SRC_CPU_CPUOPTIMIZEROPS_H
