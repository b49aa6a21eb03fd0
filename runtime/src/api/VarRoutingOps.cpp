//===- VarRoutingOps.cpp - dropless dispatch / combine: checks, backend ---===//
//
// moe_rt_dispatch_v / moe_rt_combine_v and their vjps (ops.h): each checks
// its arguments, reads the sizes into a VarRouteShape and hands the op to
// the CPU backend (src/cpu/CpuVarRoutingOps.cpp) or, on a CUDA stream, the
// CUDA one (src/cuda/CudaVarRoutingOps.h).
//
//===----------------------------------------------------------------------===//

#include "OpChecks.h"

#include "../cpu/CpuOps.h"
#if MOE_RT_HAVE_CUDA
#include "../cuda/CudaVarRoutingOps.h"
#endif

#include <algorithm>
#include <string>

using namespace moe_rt;

namespace {

/// Checks a dropless routed call: `indices` B x N x k (token choice), the
/// expert side E_l x R x M, the token side T x M, when given `rows`
/// E_l x G (NULL only for dispatch's vjp, which has none) and the expert
/// placement `slots` G x E_l (its values are checked when the op runs);
/// fills `r`. `rowsOptional`: dispatch's vjp, which has no rows.
Check varChecks(const char *call, moe_rt_stream s, moe_rt_comm comm,
                int64_t experts, int64_t block, const moe_rt_tensor *indices,
                const moe_rt_tensor *slots, const moe_rt_tensor *expertSide,
                const moe_rt_tensor *tokenSide, const moe_rt_tensor *rows,
                VarRouteShape &r, bool rowsOptional = false) {
  Check c{call, backendOf(s)};
  c.that(s != nullptr && comm != nullptr, "NULL stream or group")
      .tensor(indices, "indices", MOE_RT_I64, 1)
      .tensor(expertSide, "the expert side", MOE_RT_F32, 3)
      .tensor(tokenSide, "the tokens", MOE_RT_F32, 1)
      .tensor(rows, "rows", MOE_RT_I64, 2, rowsOptional)
      .tensor(slots, "expert_slots", MOE_RT_I64, 2, /*optional=*/true);
  if (c.status)
    return c;
  r.G = moe_rt_comm_size(comm);
  r.rank = moe_rt_comm_rank(comm);
  r.E = experts;
  r.block = block;
  r.k = dim(indices, -1);
  r.T = moe_rt_tensor_numel(indices) / std::max<int64_t>(1, r.k);
  r.M = dim(expertSide, 2);
  r.R = dim(expertSide, 1);
  c.that(experts > 0 && r.G > 0 && experts % r.G == 0,
         "experts must divide evenly over the group");
  if (c.status)
    return c;
  r.El = experts / r.G;
  c.that(dim(expertSide, 0) == r.El, "the expert side must be E_l x R x M")
      .that(dim(tokenSide, -1) == r.M &&
                moe_rt_tensor_numel(tokenSide) == r.T * r.M,
            "the tokens must be T x M, one per row of indices")
      .that(!rows || (dim(rows, 0) == r.El && dim(rows, 1) == r.G),
            "rows must be E_l x G")
      .that(!slots || (dim(slots, 0) == r.G && dim(slots, 1) == r.El),
            "expert_slots must be G x E_l (one slot per expert)");
  if (slots)
    r.slots = i64(slots);
  return c;
}

/// A token chunk's `part` of `parts` (the *_part calls): in range;
/// recorded in `r`.
Check &partChecks(Check &c, moe_rt_stream, int64_t part, int64_t parts,
                  VarRouteShape &r) {
  c.that(parts >= 1 && part >= 0 && part < parts,
         "part " + std::to_string(part) + " of " + std::to_string(parts) +
             " is not a token chunk (0 <= part < parts)");
  r.part = part;
  r.parts = parts;
  return c;
}

/// The layer's exchanged counts (`all_counts`, optional): G x E integers,
/// on a CPU stream; recorded in `r` (read when the op runs).
Check &allCountsChecks(Check &c, moe_rt_stream s,
                       const moe_rt_tensor *all_counts, VarRouteShape &r) {
  c.tensor(all_counts, "all_counts", MOE_RT_I64, 2, /*optional=*/true);
  if (c.status || !all_counts)
    return c;
  c.that(dim(all_counts, 0) == r.G && dim(all_counts, 1) == r.E,
         "all_counts must be G x E (every rank's counts per expert)")
      .that(!s || backendOf(s) != MOE_RT_CUDA,
            "exchanged counts (all_counts) are read on CPU streams only");
  r.allCounts = i64(all_counts);
  return c;
}

moe_rt_status dispatchVPart(const char *call, moe_rt_stream s,
                            moe_rt_comm comm, int64_t experts, int64_t block,
                            int64_t part, int64_t parts,
                            const moe_rt_tensor *x,
                            const moe_rt_tensor *indices,
                            const moe_rt_tensor *expert_slots,
                            const moe_rt_tensor *all_counts,
                            moe_rt_tensor *out, moe_rt_tensor *rows) {
  VarRouteShape r;
  Check c = varChecks(call, s, comm, experts, block, indices, expert_slots,
                      out, x, rows, r);
  if (allCountsChecks(partChecks(c, s, part, parts, r), s, all_counts, r)
          .status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::dispatchV(s, comm, r, f32(x), i64(indices), f32(out),
                                    i64(rows)));
  return cpu::dispatchV(s, comm, r, x, indices, out, rows);
}

moe_rt_status dispatchVPartGrad(const char *call, moe_rt_stream s,
                                moe_rt_comm comm, int64_t experts,
                                int64_t block, int64_t part, int64_t parts,
                                const moe_rt_tensor *indices,
                                const moe_rt_tensor *expert_slots,
                                const moe_rt_tensor *all_counts,
                                const moe_rt_tensor *dout, moe_rt_tensor *dx) {
  VarRouteShape r;
  Check c = varChecks(call, s, comm, experts, block, indices, expert_slots,
                      dout, dx, nullptr, r, /*rowsOptional=*/true);
  if (allCountsChecks(partChecks(c, s, part, parts, r), s, all_counts, r)
          .status)
    return c.status;
  MOE_RT_ON_CUDA(
      s, cuda::dispatchVGrad(s, comm, r, i64(indices), f32(dout), f32(dx)));
  return cpu::dispatchVGrad(s, comm, r, indices, dout, dx);
}

moe_rt_status combineVPart(const char *call, moe_rt_stream s,
                           moe_rt_comm comm, int64_t experts, int64_t part,
                           int64_t parts, const moe_rt_tensor *rows,
                           const moe_rt_tensor *expert_out,
                           const moe_rt_tensor *indices,
                           const moe_rt_tensor *expert_slots,
                           const moe_rt_tensor *weights, moe_rt_tensor *out) {
  VarRouteShape r;
  Check c = varChecks(call, s, comm, experts, -1, indices, expert_slots,
                      expert_out, out, rows, r);
  c.tensor(weights, "weights", MOE_RT_F32).sizeOf(weights, "weights", indices);
  if (partChecks(c, s, part, parts, r).status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::combineV(s, comm, r, i64(rows), f32(expert_out),
                                   i64(indices), f32(weights), f32(out)));
  return cpu::combineV(s, comm, r, rows, expert_out, indices, weights, out);
}

moe_rt_status combineVPartGrad(
    const char *call, moe_rt_stream s, moe_rt_comm comm, int64_t experts,
    int64_t part, int64_t parts, const moe_rt_tensor *rows,
    const moe_rt_tensor *expert_out, const moe_rt_tensor *indices,
    const moe_rt_tensor *expert_slots, const moe_rt_tensor *weights,
    const moe_rt_tensor *dout, moe_rt_tensor *dexpert_out,
    moe_rt_tensor *dweights) {
  VarRouteShape r;
  Check c = varChecks(call, s, comm, experts, -1, indices, expert_slots,
                      expert_out, dout, rows, r);
  c.tensor(weights, "weights", MOE_RT_F32)
      .sizeOf(weights, "weights", indices)
      .tensor(dweights, "dweights", MOE_RT_F32)
      .sizeOf(dweights, "dweights", indices)
      .tensor(dexpert_out, "dexpert_out", MOE_RT_F32)
      .sizeOf(dexpert_out, "dexpert_out", expert_out);
  if (partChecks(c, s, part, parts, r).status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::combineVGrad(s, comm, r, i64(rows), f32(expert_out),
                                       i64(indices), f32(weights), f32(dout),
                                       f32(dexpert_out), f32(dweights)));
  return cpu::combineVGrad(s, comm, r, rows, expert_out, indices, weights,
                           dout, dexpert_out, dweights);
}

} // namespace

extern "C" {

moe_rt_status moe_rt_dispatch_v(moe_rt_stream s, moe_rt_comm comm,
                                int64_t experts, int64_t block,
                                const moe_rt_tensor *x,
                                const moe_rt_tensor *indices,
                                const moe_rt_tensor *expert_slots,
                                moe_rt_tensor *out, moe_rt_tensor *rows) {
  return dispatchVPart("moe_rt_dispatch_v", s, comm, experts, block, 0, 1, x,
                       indices, expert_slots, nullptr, out, rows);
}

moe_rt_status moe_rt_dispatch_v_grad(moe_rt_stream s, moe_rt_comm comm,
                                     int64_t experts, int64_t block,
                                     const moe_rt_tensor *indices,
                                     const moe_rt_tensor *expert_slots,
                                     const moe_rt_tensor *dout,
                                     moe_rt_tensor *dx) {
  return dispatchVPartGrad("moe_rt_dispatch_v_grad", s, comm, experts, block,
                           0, 1, indices, expert_slots, nullptr, dout, dx);
}

moe_rt_status moe_rt_combine_v(moe_rt_stream s, moe_rt_comm comm,
                               int64_t experts, const moe_rt_tensor *rows,
                               const moe_rt_tensor *expert_out,
                               const moe_rt_tensor *indices,
                               const moe_rt_tensor *expert_slots,
                               const moe_rt_tensor *weights,
                               moe_rt_tensor *out) {
  return combineVPart("moe_rt_combine_v", s, comm, experts, 0, 1, rows,
                      expert_out, indices, expert_slots, weights, out);
}

moe_rt_status moe_rt_combine_v_grad(
    moe_rt_stream s, moe_rt_comm comm, int64_t experts,
    const moe_rt_tensor *rows, const moe_rt_tensor *expert_out,
    const moe_rt_tensor *indices, const moe_rt_tensor *expert_slots,
    const moe_rt_tensor *weights, const moe_rt_tensor *dout,
    moe_rt_tensor *dexpert_out, moe_rt_tensor *dweights) {
  return combineVPartGrad("moe_rt_combine_v_grad", s, comm, experts, 0, 1,
                          rows, expert_out, indices, expert_slots, weights,
                          dout, dexpert_out, dweights);
}

moe_rt_status moe_rt_dispatch_v_part(moe_rt_stream s, moe_rt_comm comm,
                                     int64_t experts, int64_t block,
                                     int64_t part, int64_t parts,
                                     const moe_rt_tensor *x,
                                     const moe_rt_tensor *indices,
                                     const moe_rt_tensor *expert_slots,
                                     const moe_rt_tensor *all_counts,
                                     moe_rt_tensor *out, moe_rt_tensor *rows) {
  return dispatchVPart("moe_rt_dispatch_v_part", s, comm, experts, block,
                       part, parts, x, indices, expert_slots, all_counts, out,
                       rows);
}

moe_rt_status moe_rt_dispatch_v_part_grad(
    moe_rt_stream s, moe_rt_comm comm, int64_t experts, int64_t block,
    int64_t part, int64_t parts, const moe_rt_tensor *indices,
    const moe_rt_tensor *expert_slots, const moe_rt_tensor *all_counts,
    const moe_rt_tensor *dout, moe_rt_tensor *dx) {
  return dispatchVPartGrad("moe_rt_dispatch_v_part_grad", s, comm, experts,
                           block, part, parts, indices, expert_slots,
                           all_counts, dout, dx);
}

moe_rt_status moe_rt_exchange_counts(moe_rt_stream s, moe_rt_comm comm,
                                     int64_t experts, int64_t block,
                                     const moe_rt_tensor *indices,
                                     moe_rt_tensor *out) {
  Check c{"moe_rt_exchange_counts", backendOf(s)};
  c.that(s != nullptr && comm != nullptr, "NULL stream or group")
      .that(!s || backendOf(s) == MOE_RT_CPU, "runs on CPU streams only")
      .tensor(indices, "indices", MOE_RT_I64, 1)
      .tensor(out, "out", MOE_RT_I64, 2);
  if (c.status)
    return c.status;
  c.that(experts > 0 && dim(out, 0) == moe_rt_comm_size(comm) &&
             dim(out, 1) == experts,
         "out must be G x E (G the group's ranks, E the experts)");
  if (c.status)
    return c.status;
  return cpu::exchangeCounts(s, comm, experts, block, indices, out);
}

moe_rt_status moe_rt_combine_v_part(
    moe_rt_stream s, moe_rt_comm comm, int64_t experts, int64_t part,
    int64_t parts, const moe_rt_tensor *rows, const moe_rt_tensor *expert_out,
    const moe_rt_tensor *indices, const moe_rt_tensor *expert_slots,
    const moe_rt_tensor *weights, moe_rt_tensor *out) {
  return combineVPart("moe_rt_combine_v_part", s, comm, experts, part, parts,
                      rows, expert_out, indices, expert_slots, weights, out);
}

moe_rt_status moe_rt_combine_v_part_grad(
    moe_rt_stream s, moe_rt_comm comm, int64_t experts, int64_t part,
    int64_t parts, const moe_rt_tensor *rows, const moe_rt_tensor *expert_out,
    const moe_rt_tensor *indices, const moe_rt_tensor *expert_slots,
    const moe_rt_tensor *weights, const moe_rt_tensor *dout,
    moe_rt_tensor *dexpert_out, moe_rt_tensor *dweights) {
  return combineVPartGrad("moe_rt_combine_v_part_grad", s, comm, experts,
                          part, parts, rows, expert_out, indices, expert_slots,
                          weights, dout, dexpert_out, dweights);
}

moe_rt_status moe_rt_rows_sum(moe_rt_stream s, const moe_rt_tensor *rows,
                              moe_rt_tensor *total, int64_t accumulate) {
  Check c{"moe_rt_rows_sum", backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .tensor(rows, "rows", MOE_RT_I64, 2)
      .tensor(total, "total", MOE_RT_I64, 2)
      .sizeOf(total, "total", rows);
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::rowsSum(s, moe_rt_tensor_numel(rows), i64(rows),
                                  i64(total), accumulate != 0));
  return cpu::rowsSum(s, moe_rt_tensor_numel(rows), rows, total,
                      accumulate != 0);
}

moe_rt_status moe_rt_rows_window(moe_rt_stream s, int64_t from_part,
                                 int64_t from_parts, int64_t part,
                                 int64_t parts, const moe_rt_tensor *total,
                                 const moe_rt_tensor *chunk_rows,
                                 const moe_rt_tensor *chunk,
                                 moe_rt_tensor *out) {
  Check c{"moe_rt_rows_window", backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .that(from_parts >= 1 && from_part >= 0 && from_part < from_parts &&
                parts >= 1 && part >= 0 && part < parts,
            "chunks must satisfy 0 <= part < parts")
      .tensor(total, "total", MOE_RT_I64, 2)
      .tensor(chunk_rows, "chunk_rows", MOE_RT_I64, 2)
      .sizeOf(chunk_rows, "chunk_rows", total)
      .tensor(chunk, "chunk", MOE_RT_F32, 3)
      .tensor(out, "out", MOE_RT_F32, 3);
  if (c.status)
    return c.status;
  RowsWindowShape w;
  w.El = dim(total, 0);
  w.G = dim(total, 1);
  w.chunkRows = dim(chunk, 1);
  w.outRows = dim(out, 1);
  w.M = dim(chunk, 2);
  w.fromPart = from_part;
  w.fromParts = from_parts;
  w.part = part;
  w.parts = parts;
  c.that(dim(chunk, 0) == w.El && dim(out, 0) == w.El && dim(out, 2) == w.M,
         "chunk and out must be E_l x R x M, E_l the rows' first dimension");
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::rowsWindow(s, w, i64(total), i64(chunk_rows),
                                     f32(chunk), f32(out)));
  return cpu::rowsWindow(s, w, total, chunk_rows, chunk, out);
}

moe_rt_status moe_rt_rows_part(moe_rt_stream s, int64_t part, int64_t parts,
                               moe_rt_tensor *rows) {
  Check c{"moe_rt_rows_part", backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .that(parts >= 1 && part >= 0 && part < parts,
            "chunks must satisfy 0 <= part < parts")
      .tensor(rows, "rows", MOE_RT_I64, 2);
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::rowsPart(s, moe_rt_tensor_numel(rows), part, parts,
                                   i64(rows)));
  return cpu::rowsPart(s, moe_rt_tensor_numel(rows), part, parts, rows);
}

} // extern "C"

// The placing combine (NetMoE): the same checks, plus the placement (G B
// new ranks) and, when given, the inlined residual (the dispatch's rows).
namespace {
Check placedChecks(Check c, const VarRouteShape &r,
                   const moe_rt_tensor *indices, const moe_rt_tensor *place,
                   const moe_rt_tensor *residual,
                   const moe_rt_tensor *expertSide, int64_t &B) {
  c.tensor(place, "place", MOE_RT_I64, 1)
      .tensor(residual, "residual", MOE_RT_F32, 3, /*optional=*/true)
      .sizeOf(residual, "residual", expertSide);
  if (c.status)
    return c;
  B = dim(indices, 0);
  return c.that(indices->rank == 3 && B > 0,
                "indices must be B x N x k to place whole samples")
      .size(place, "place", r.G * B);
}
} // namespace

extern "C" {

moe_rt_status moe_rt_combine_v_place(
    moe_rt_stream s, moe_rt_comm comm, int64_t experts,
    const moe_rt_tensor *rows, const moe_rt_tensor *expert_out,
    const moe_rt_tensor *indices, const moe_rt_tensor *expert_slots,
    const moe_rt_tensor *weights, const moe_rt_tensor *residual,
    const moe_rt_tensor *place, moe_rt_tensor *out) {
  VarRouteShape r;
  int64_t B = 0;
  Check c = varChecks("moe_rt_combine_v_place", s, comm, experts, -1, indices,
                      expert_slots, expert_out, out, rows, r);
  c.tensor(weights, "weights", MOE_RT_F32).sizeOf(weights, "weights", indices);
  c = placedChecks(c, r, indices, place, residual, expert_out, B);
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::combineVPlaced(s, comm, r, B, f32(expert_out),
                                         i64(indices), f32(weights),
                                         residual ? f32(residual) : nullptr,
                                         i64(place), f32(out)));
  return cpu::combineVPlaced(s, comm, r, B, expert_out, indices, weights,
                             residual, place, out);
}

moe_rt_status moe_rt_combine_v_place_grad(
    moe_rt_stream s, moe_rt_comm comm, int64_t experts,
    const moe_rt_tensor *rows, const moe_rt_tensor *expert_out,
    const moe_rt_tensor *indices, const moe_rt_tensor *expert_slots,
    const moe_rt_tensor *weights, const moe_rt_tensor *residual,
    const moe_rt_tensor *place, const moe_rt_tensor *dout,
    moe_rt_tensor *dexpert_out, moe_rt_tensor *dweights,
    moe_rt_tensor *dresidual) {
  VarRouteShape r;
  int64_t B = 0;
  Check c = varChecks("moe_rt_combine_v_place_grad", s, comm, experts, -1,
                      indices, expert_slots, expert_out, dout, rows, r);
  c.tensor(weights, "weights", MOE_RT_F32)
      .sizeOf(weights, "weights", indices)
      .tensor(dweights, "dweights", MOE_RT_F32)
      .sizeOf(dweights, "dweights", indices)
      .tensor(dexpert_out, "dexpert_out", MOE_RT_F32)
      .sizeOf(dexpert_out, "dexpert_out", expert_out)
      .tensor(dresidual, "dresidual", MOE_RT_F32, 3, /*optional=*/!residual)
      .sizeOf(dresidual, "dresidual", expert_out);
  c = placedChecks(c, r, indices, place, residual, expert_out, B);
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::combineVPlacedGrad(
                        s, comm, r, B, f32(expert_out), i64(indices),
                        f32(weights), i64(place), f32(dout), f32(dexpert_out),
                        f32(dweights), residual ? f32(dresidual) : nullptr));
  return cpu::combineVPlacedGrad(s, comm, r, B, expert_out, indices, weights,
                                 place, dout, dexpert_out, dweights,
                                 residual ? dresidual : nullptr);
}

} // extern "C"
