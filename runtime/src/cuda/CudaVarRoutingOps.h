//===- CudaVarRoutingOps.h - dropless routing and experts on CUDA -*- C++
//-*-===//
//
// What src/api/VarRoutingOps.cpp and DenseOps.cpp call for moe_rt_dispatch_v,
// moe_rt_combine_v (token chunks and expert placements included),
// moe_rt_expert_v, their vjps and the rows_* calls when the stream is a CUDA
// one, after their own checks (pointers: device memory of the stream's
// device). The ops are src/device/VarRoutingOps.h's templates on a
// CudaExecutor and an NCCL link (CudaVarRoutingOps.cu); each waits for its
// stream once, to read the counts it sizes its exchanges and GEMMs by.
//
// Plain C++ (no CUDA headers): the C API's files include it.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CUDA_CUDAVARROUTINGOPS_H
#define MOE_RT_SRC_CUDA_CUDAVARROUTINGOPS_H

#include "../OpShapes.h"

#include "moe_rt/collectives.h"
#include "moe_rt/ops.h"

namespace moe_rt::cuda {

/// moe_rt_dispatch_v: x T x M, indices T x k -> out E_l x R x M, rows
/// E_l x G (both overwritten).
moe_rt_status dispatchV(moe_rt_stream s, moe_rt_comm comm,
                        const VarRouteShape &r, const float *x,
                        const int64_t *indices, float *out, int64_t *rows);
/// moe_rt_dispatch_v_grad: dout E_l x R x M -> dx T x M (overwritten).
moe_rt_status dispatchVGrad(moe_rt_stream s, moe_rt_comm comm,
                            const VarRouteShape &r, const int64_t *indices,
                            const float *dout, float *dx);
/// moe_rt_combine_v: expert_out E_l x R x M -> out T x M.
moe_rt_status combineV(moe_rt_stream s, moe_rt_comm comm,
                       const VarRouteShape &r, const int64_t *rows,
                       const float *expertOut, const int64_t *indices,
                       const float *weights, float *out);
/// moe_rt_combine_v_grad: dexpert_out and dweights overwritten.
moe_rt_status combineVGrad(moe_rt_stream s, moe_rt_comm comm,
                           const VarRouteShape &r, const int64_t *rows,
                           const float *expertOut, const int64_t *indices,
                           const float *weights, const float *dout,
                           float *dexpertOut, float *dweights);
/// moe_rt_expert_v: rows E_l x G (G = `ranks`); out overwritten.
moe_rt_status expertV(moe_rt_stream s, moe_rt_activation act,
                      const ExpertShape &f, int64_t ranks, const int64_t *rows,
                      const float *x, const float *up, const float *gate,
                      const float *down, float *out);
/// moe_rt_expert_v_grad: dx, dup, dgate (null iff gate is), ddown
/// overwritten.
moe_rt_status expertVGrad(moe_rt_stream s, moe_rt_activation act,
                          const ExpertShape &f, int64_t ranks,
                          const int64_t *rows, const float *x, const float *up,
                          const float *gate, const float *down,
                          const float *dout, float *dx, float *dup,
                          float *dgate, float *ddown);

/// moe_rt_rows_sum: total (n entries) = rows, or += rows when accumulate.
moe_rt_status rowsSum(moe_rt_stream s, int64_t n, const int64_t *rows,
                      int64_t *total, bool accumulate);
/// moe_rt_rows_window: out's rows shared with forward chunk w.fromPart
/// copied from `chunk` (src/device/TokenChunkOps.h; reads the two tables
/// to the host).
moe_rt_status rowsWindow(moe_rt_stream s, const RowsWindowShape &w,
                         const int64_t *total, const int64_t *chunkRows,
                         const float *chunk, float *out);
/// moe_rt_rows_part: rows (n entries) -> chunk part of parts, in place.
moe_rt_status rowsPart(moe_rt_stream s, int64_t n, int64_t part, int64_t parts,
                       int64_t *rows);

/// NetMoE (src/device/PlacementOps.h): moe_rt_combine_v_place, B samples
/// per rank, residual may be null; out overwritten.
moe_rt_status combineVPlaced(moe_rt_stream s, moe_rt_comm comm,
                             const VarRouteShape &r, int64_t B,
                             const float *expertOut, const int64_t *indices,
                             const float *weights, const float *residual,
                             const int64_t *place, float *out);
/// moe_rt_combine_v_place_grad: dexpertOut, dweights and dresidual (null
/// without a residual) overwritten.
moe_rt_status combineVPlacedGrad(moe_rt_stream s, moe_rt_comm comm,
                                 const VarRouteShape &r, int64_t B,
                                 const float *expertOut,
                                 const int64_t *indices, const float *weights,
                                 const int64_t *place, const float *dout,
                                 float *dexpertOut, float *dweights,
                                 float *dresidual);
/// moe_rt_move_samples: x and out B x row int64s; G and rank: the group's
/// (the module does not call back for them).
moe_rt_status moveSamples(moe_rt_stream s, moe_rt_comm comm, int64_t G,
                          int64_t rank, int64_t B, int64_t row,
                          const int64_t *place, const int64_t *x,
                          int64_t *out);

} // namespace moe_rt::cuda

#endif // MOE_RT_SRC_CUDA_CUDAVARROUTINGOPS_H
