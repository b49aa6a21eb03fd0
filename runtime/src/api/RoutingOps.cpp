//===- RoutingOps.cpp - dispatch, combine and plumbing: checks, backend ---===//
//
// moe.dispatch / moe.combine and their vjps, add, copy (split/merge), SGD
// and all-reduce into a result: each checks its arguments, then hands the
// op to its stream's backend (src/cpu/CpuOps.h or src/cuda's).
//
//===----------------------------------------------------------------------===//

#include "OpChecks.h"

#include "../cpu/CpuOps.h"
#include "AllReduceGroups.h"

#if MOE_RT_HAVE_CUDA
#include "../cuda/CudaDenseOps.h"
#include "../cuda/CudaRoutingOps.h"
#endif

#include <algorithm>
#include <string>

using namespace moe_rt;

namespace {

using Route = RouteShape;

/// Expert-choice indices are E x C (the dialect's form, moe.gate
/// expert_choice); token-choice ones are B x N x k — or any shape whose
/// last dimension is k, so a rank-2 tensor that is not E x C stays token
/// choice (T x k callers).
bool isExpertChoice(const moe_rt_tensor *indices, int64_t experts,
                    int64_t capacity) {
  return indices->rank == 2 && indices->shape[0] == experts &&
         indices->shape[1] == capacity;
}

/// `first`, `count`: the window of capacity slots the op moves (a token
/// chunk); [0, capacity) for the whole buffer.
moe_rt_status routeChecks(const char *call, moe_rt_stream s, moe_rt_comm comm,
                          int64_t experts, int64_t capacity, int64_t first,
                          int64_t count, const moe_rt_tensor *indices,
                          const moe_rt_tensor *expertSide,
                          const moe_rt_tensor *tokenSide, Route &r) {
  auto bad = [&](const std::string &why) {
    return fail(MOE_RT_INVALID_ARGUMENT, std::string(call) + ": " + why);
  };
  if (!s || !comm)
    return bad("NULL stream or group");
  moe_rt_backend on = backendOf(s);
  std::string where = on == MOE_RT_CUDA ? "CUDA" : "CPU";
  if (!isOn(indices, MOE_RT_I64, on) || indices->rank < 1)
    return bad("indices must be a " + where +
               " I64 tensor (B x N x k, or E x C for expert choice)");
  if (!isOn(expertSide, MOE_RT_F32, on) || expertSide->rank != 3 ||
      !isOn(tokenSide, MOE_RT_F32, on) || tokenSide->rank < 1)
    return bad("needs F32 " + where +
               " tensors: E_l x (G C) x M and tokens x M");
  r.G = moe_rt_comm_size(comm);
  r.E = experts;
  r.C = count;
  r.O = first;
  r.M = expertSide->shape[2];
  r.ec = isExpertChoice(indices, experts, capacity);
  if (first < 0 || count <= 0 || first + count > capacity)
    return bad("the slot window [" + std::to_string(first) + ", " +
               std::to_string(first + count) + ") is not inside the capacity " +
               std::to_string(capacity));
  if (r.ec && count != capacity)
    return bad("expert-choice routing (E x C indices) cannot move a window "
               "of its slots");
  r.k = r.ec ? 0 : indices->shape[indices->rank - 1];
  r.T = r.ec ? moe_rt_tensor_numel(tokenSide) / std::max<int64_t>(1, r.M)
             : moe_rt_tensor_numel(indices) / std::max<int64_t>(1, r.k);
  if (experts <= 0 || capacity <= 0 || experts % r.G)
    return bad("experts must divide evenly over the group and capacity be "
               "positive");
  r.El = experts / r.G;
  if (expertSide->shape[0] != r.El || expertSide->shape[1] != r.G * r.C ||
      tokenSide->shape[tokenSide->rank - 1] != r.M ||
      moe_rt_tensor_numel(tokenSide) != r.T * r.M)
    return bad("shapes do not match E_l x (G C) x M and the routed tokens");
  return MOE_RT_OK;
}

} // namespace

extern "C" {

moe_rt_status moe_rt_dispatch(moe_rt_stream s, moe_rt_comm comm,
                              int64_t experts, int64_t capacity,
                              const moe_rt_tensor *x,
                              const moe_rt_tensor *indices,
                              moe_rt_tensor *out) {
  return moe_rt_dispatch_slots(s, comm, experts, capacity, 0, capacity, x,
                               indices, out);
}

moe_rt_status moe_rt_dispatch_slots(moe_rt_stream s, moe_rt_comm comm,
                                    int64_t experts, int64_t capacity,
                                    int64_t first, int64_t count,
                                    const moe_rt_tensor *x,
                                    const moe_rt_tensor *indices,
                                    moe_rt_tensor *out) {
  Route r{};
  if (moe_rt_status st = routeChecks("moe_rt_dispatch", s, comm, experts,
                                     capacity, first, count, indices, out, x,
                                     r))
    return st;
  MOE_RT_ON_CUDA(s, cuda::dispatch(s, comm, r, f32(x),
                                   i64(indices), f32(out)));
  return cpu::dispatch(s, comm, r, x, indices, out);
}

moe_rt_status moe_rt_dispatch_grad(moe_rt_stream s, moe_rt_comm comm,
                                   int64_t experts, int64_t capacity,
                                   const moe_rt_tensor *indices,
                                   const moe_rt_tensor *dout,
                                   moe_rt_tensor *dx) {
  return moe_rt_dispatch_slots_grad(s, comm, experts, capacity, 0, capacity,
                                    indices, dout, dx);
}

moe_rt_status moe_rt_dispatch_slots_grad(moe_rt_stream s, moe_rt_comm comm,
                                         int64_t experts, int64_t capacity,
                                         int64_t first, int64_t count,
                                         const moe_rt_tensor *indices,
                                         const moe_rt_tensor *dout,
                                         moe_rt_tensor *dx) {
  Route r{};
  if (moe_rt_status st =
          routeChecks("moe_rt_dispatch_grad", s, comm, experts, capacity,
                      first, count, indices, dout, dx, r))
    return st;
  MOE_RT_ON_CUDA(s, cuda::dispatchGrad(s, comm, r, i64(indices),
                                       f32(dout), f32(dx)));
  return cpu::dispatchGrad(s, comm, r, indices, dout, dx);
}

moe_rt_status moe_rt_combine(moe_rt_stream s, moe_rt_comm comm, int64_t experts,
                             int64_t capacity, const moe_rt_tensor *expert_out,
                             const moe_rt_tensor *indices,
                             const moe_rt_tensor *weights, moe_rt_tensor *out) {
  return moe_rt_combine_slots(s, comm, experts, capacity, 0, capacity,
                              expert_out, indices, weights, out);
}

moe_rt_status moe_rt_combine_slots(moe_rt_stream s, moe_rt_comm comm,
                                   int64_t experts, int64_t capacity,
                                   int64_t first, int64_t count,
                                   const moe_rt_tensor *expert_out,
                                   const moe_rt_tensor *indices,
                                   const moe_rt_tensor *weights,
                                   moe_rt_tensor *out) {
  Route r{};
  if (moe_rt_status st =
          routeChecks("moe_rt_combine", s, comm, experts, capacity, first,
                      count, indices, expert_out, out, r))
    return st;
  if (!isOn(weights, MOE_RT_F32, backendOf(s)) ||
      moe_rt_tensor_numel(weights) != moe_rt_tensor_numel(indices))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_combine: weights must match indices");
  MOE_RT_ON_CUDA(s, cuda::combine(s, comm, r, f32(expert_out),
                                  i64(indices), f32(weights), f32(out)));
  return cpu::combine(s, comm, r, expert_out, indices, weights, out);
}

moe_rt_status
moe_rt_combine_grad(moe_rt_stream s, moe_rt_comm comm, int64_t experts,
                    int64_t capacity, const moe_rt_tensor *expert_out,
                    const moe_rt_tensor *indices, const moe_rt_tensor *weights,
                    const moe_rt_tensor *dout, moe_rt_tensor *dexpert_out,
                    moe_rt_tensor *dweights) {
  return moe_rt_combine_slots_grad(s, comm, experts, capacity, 0, capacity,
                                   expert_out, indices, weights, dout,
                                   dexpert_out, dweights);
}

moe_rt_status moe_rt_combine_slots_grad(
    moe_rt_stream s, moe_rt_comm comm, int64_t experts, int64_t capacity,
    int64_t first, int64_t count, const moe_rt_tensor *expert_out,
    const moe_rt_tensor *indices, const moe_rt_tensor *weights,
    const moe_rt_tensor *dout, moe_rt_tensor *dexpert_out,
    moe_rt_tensor *dweights) {
  Route r{};
  if (moe_rt_status st =
          routeChecks("moe_rt_combine_grad", s, comm, experts, capacity, first,
                      count, indices, expert_out, dout, r))
    return st;
  if (!isOn(weights, MOE_RT_F32, backendOf(s)) ||
      !isOn(dweights, MOE_RT_F32, backendOf(s)) ||
      !isOn(dexpert_out, MOE_RT_F32, backendOf(s)) ||
      moe_rt_tensor_numel(dexpert_out) != moe_rt_tensor_numel(expert_out) ||
      moe_rt_tensor_numel(weights) != moe_rt_tensor_numel(indices) ||
      moe_rt_tensor_numel(dweights) != moe_rt_tensor_numel(indices))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_combine_grad: bad weights or gradient tensors");
  MOE_RT_ON_CUDA(s, cuda::combineGrad(s, comm, r, f32(expert_out),
                                      i64(indices), f32(weights), f32(dout),
                                      f32(dexpert_out), f32(dweights)));
  return cpu::combineGrad(s, comm, r, expert_out, indices, weights, dout,
                          dexpert_out, dweights);
}

moe_rt_status moe_rt_add(moe_rt_stream s, const moe_rt_tensor *a,
                         const moe_rt_tensor *b, moe_rt_tensor *out) {
  if (!oneSizeF32(s, {a, b, out}))
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_add: needs three F32 tensors "
                                         "of one size on the stream's backend");
  int64_t n = moe_rt_tensor_numel(a);
  MOE_RT_ON_CUDA(s, cuda::add(s, n, f32(a), f32(b), f32(out)));
  return cpu::add(s, n, a, b, out);
}

moe_rt_status moe_rt_copy(moe_rt_stream s, const moe_rt_tensor *src,
                          int64_t src_offset, moe_rt_tensor *dst,
                          int64_t dst_offset, int64_t count) {
  if (!s || !src || !dst || !src->data || !dst->data ||
      src->dtype != dst->dtype || src_offset < 0 || dst_offset < 0 ||
      count < 0 || src_offset + count > moe_rt_tensor_numel(src) ||
      dst_offset + count > moe_rt_tensor_numel(dst))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_copy: tensors of one dtype and a range inside both");
  if (src->backend != backendOf(s) || dst->backend != backendOf(s))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_copy: both tensors must be on the stream's backend");
  MOE_RT_ON_CUDA(s, cuda::copy(s, src->data, src_offset, dst->data, dst_offset,
                               count, moe_rt_dtype_size(src->dtype)));
  return cpu::copy(s, src, src_offset, dst, dst_offset, count);
}

moe_rt_status moe_rt_sgd(moe_rt_stream s, const moe_rt_tensor *param,
                         const moe_rt_tensor *grad, double lr,
                         moe_rt_tensor *out) {
  if (!oneSizeF32(s, {param, grad, out}))
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_sgd: needs three F32 tensors "
                                         "of one size on the stream's backend");
  int64_t n = moe_rt_tensor_numel(param);
  MOE_RT_ON_CUDA(s, cuda::sgd(s, n, f32(param), f32(grad), lr, f32(out)));
  return cpu::sgd(s, n, param, grad, lr, out);
}

moe_rt_status moe_rt_all_reduce_into(moe_rt_stream s, moe_rt_comm comm,
                                     const moe_rt_tensor *src,
                                     moe_rt_tensor *out, int64_t offset_bytes,
                                     int64_t size_bytes) {
  if (!comm || !oneSizeF32(s, {src, out}))
    return fail(
        MOE_RT_INVALID_ARGUMENT,
        "moe_rt_all_reduce_into: needs F32 tensors of one size on the stream's "
        "backend");
  int64_t n = moe_rt_tensor_numel(src);
#if MOE_RT_HAVE_CUDA
  if (backendOf(s) == MOE_RT_CUDA) {
    if (moe_rt_status st = cuda::copy(s, src->data, 0, out->data, 0, n,
                                      sizeof(float),
                                      /*lowPriority=*/true))
      return st;
    return moe_rt_all_reduce(s, comm, out, offset_bytes, size_bytes);
  }
#endif
  if (deferToGroup(s, comm, src, out, offset_bytes, size_bytes))
    return ok(); // runs at moe_rt_all_reduce_group_end, packed with others
  // The copy joins the all-reduce in the pool's low-priority queue, so that
  // a wait before this op gates both.
  if (moe_rt_status st = cpu::copy(s, src, 0, out, 0, n, /*lowPriority=*/true))
    return st;
  return moe_rt_all_reduce(s, comm, out, offset_bytes, size_bytes);
}

} // extern "C"
