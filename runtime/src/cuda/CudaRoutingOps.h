//===- CudaRoutingOps.h - gates, routing, experts on CUDA -------*- C++ -*-===//
//
// What the C API (src/api/GateOps.cpp, RoutingOps.cpp, DenseOps.cpp) calls
// when the stream is a CUDA one, after its own argument checks: the shapes
// arrive checked, the pointers are device memory of the stream's device.
// Each call queues its kernels (and, for dispatch/combine, the group's
// moe_rt_all_to_all on CUDA tensor views of its scratch) on the stream and
// returns; failures of the launches are returned, data-dependent ones (an
// expert index out of range) fail the stream's next synchronize.
//
// Plain C++ (no CUDA headers): the C API's files include it. The shape
// structs and the op templates are in src/device (GateOps.h, RoutingOps.h,
// ExpertOps.h); CudaRoutingOps.cu instantiates them for CudaExecutor.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CUDA_CUDAROUTINGOPS_H
#define MOE_RT_SRC_CUDA_CUDAROUTINGOPS_H

#include "../device/ExpertOps.h"
#include "../device/GateOps.h"
#include "../device/RoutingOps.h"

#include "moe_rt/collectives.h"
#include "moe_rt/ops.h"

namespace moe_rt::cuda {

using device::ExpertShape;
using device::GateShape;
using device::RouteShape;

/// moe_rt_gate: x T x M, w (M x E, or D x E for cosine), aux (W_noise
/// M x E, W_proj M x D, or null); indices/weights T x k (E x C for
/// expert_choice, C = z.k), counts E.
moe_rt_status gate(moe_rt_stream s, const GateShape &z, const float *x,
                   const float *w, const float *aux, int64_t *indices,
                   float *weights, int64_t *counts);
/// moe_rt_gate_grad: dx, dw, daux overwritten (daux null iff aux is).
moe_rt_status gateGrad(moe_rt_stream s, const GateShape &z, const float *x,
                       const float *w, const float *aux,
                       const float *dweights, float *dx, float *dw,
                       float *daux);

/// moe_rt_expert: out overwritten; gate may be null.
moe_rt_status expert(moe_rt_stream s, moe_rt_activation act,
                     const ExpertShape &f, const float *x, const float *up,
                     const float *gate, const float *down, float *out);
/// moe_rt_expert_grad: dx, dup, dgate (null iff gate is), ddown overwritten.
moe_rt_status expertGrad(moe_rt_stream s, moe_rt_activation act,
                         const ExpertShape &f, const float *x, const float *up,
                         const float *gate, const float *down,
                         const float *dout, float *dx, float *dup, float *dgate,
                         float *ddown);

/// Dispatch and combine: token choice (indices T x k, r.k = k) or, with
/// r.ec, expert choice (indices E x C token ids, -1 empty; dweights E x C).
/// The all-to-all(s) run whatever the data: a bad index fails the stream
/// but never leaves the group's other ranks waiting.

/// moe_rt_dispatch: x T x M -> out El x (G C) x M.
moe_rt_status dispatch(moe_rt_stream s, moe_rt_comm comm, const RouteShape &r,
                       const float *x, const int64_t *indices, float *out);
/// moe_rt_dispatch_grad: dout El x (G C) x M -> dx T x M (overwritten).
moe_rt_status dispatchGrad(moe_rt_stream s, moe_rt_comm comm,
                           const RouteShape &r, const int64_t *indices,
                           const float *dout, float *dx);
/// moe_rt_combine: expert_out El x (G C) x M -> out T x M.
moe_rt_status combine(moe_rt_stream s, moe_rt_comm comm, const RouteShape &r,
                      const float *expertOut, const int64_t *indices,
                      const float *weights, float *out);
/// moe_rt_combine_grad: dexpert_out (El x (G C) x M) and dweights (T x k,
/// or E x C) overwritten.
moe_rt_status combineGrad(moe_rt_stream s, moe_rt_comm comm,
                          const RouteShape &r, const float *expertOut,
                          const int64_t *indices, const float *weights,
                          const float *dout, float *dexpertOut,
                          float *dweights);

} // namespace moe_rt::cuda

#endif // MOE_RT_SRC_CUDA_CUDAROUTINGOPS_H
