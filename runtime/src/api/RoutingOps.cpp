//===- RoutingOps.cpp - dispatch, combine and plumbing on streams
//----------===//
//
// moe.dispatch / moe.combine and their vjps: the routing kernels around the
// group's all-to-all, queued in order on one communication stream. The
// vjp of combine brings the expert outputs to the tokens' ranks again
// rather than keeping them from the forward (one more all-to-all, no saved
// state). Expert-choice routing (E x C indices, kernels/ExpertChoice.h)
// fills and reads the same E x C x M buffers around the same all-to-all.
// Plumbing: add, copy (split/merge), SGD, all-reduce into a result.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/ops.h"

#include "../Backend.h"
#include "../Error.h"
#include "OnCuda.h"

#include "kernels/ExpertChoice.h"
#include "kernels/Routing.h"

#if MOE_RT_HAVE_CUDA
#include "../cuda/CudaDenseOps.h"
#include "../cuda/CudaRoutingOps.h"
#endif

#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace moe_rt;
namespace k = moe_rt::kernels;

namespace {

float *f32(const moe_rt_tensor *t) { return static_cast<float *>(t->data); }
const int64_t *i64(const moe_rt_tensor *t) {
  return static_cast<const int64_t *>(t->data);
}

/// A tensor of `dtype` on `backend` (the stream's: CPU or CUDA).
bool isOn(const moe_rt_tensor *t, moe_rt_dtype dtype, moe_rt_backend backend) {
  return t && t->data && t->backend == backend && t->dtype == dtype &&
         moe_rt_tensor_numel(t) >= 0;
}

/// A scratch buffer shared by the tasks of one op, with a tensor view.
struct Scratch {
  std::vector<float> data;
  moe_rt_tensor view{};
  explicit Scratch(int64_t e, int64_t c, int64_t m) : data(e * c * m, 0.0f) {
    view.data = data.data();
    view.rank = 3;
    view.shape[0] = e;
    view.shape[1] = c;
    view.shape[2] = m;
    view.dtype = MOE_RT_F32;
    view.backend = MOE_RT_CPU;
  }
};

/// Shapes of a routed op: T tokens with k choices, E experts over G ranks
/// (E_l local), capacity C, embedding M. ec: expert-choice routing (E x C
/// indices; k is then 0 and T comes from the token-side tensor).
struct Route {
  int64_t T, k, E, G, El, C, M;
  bool ec;
};

/// Expert-choice indices are E x C (the dialect's form, moe.gate
/// expert_choice); token-choice ones are B x N x k — or any shape whose
/// last dimension is k, so a rank-2 tensor that is not E x C stays token
/// choice (T x k callers).
bool isExpertChoice(const moe_rt_tensor *indices, int64_t experts,
                    int64_t capacity) {
  return indices->rank == 2 && indices->shape[0] == experts &&
         indices->shape[1] == capacity;
}

moe_rt_status routeChecks(const char *call, moe_rt_stream s, moe_rt_comm comm,
                          int64_t experts, int64_t capacity,
                          const moe_rt_tensor *indices,
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
  r.C = capacity;
  r.M = expertSide->shape[2];
  r.ec = isExpertChoice(indices, experts, capacity);
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

moe_rt_status task(moe_rt_stream s, std::function<void()> body) {
  return s->impl->enqueueHost(
      [body](std::string &) {
        body();
        return MOE_RT_OK;
      },
      false);
}

/// One routing exchange, as dispatch, combine and dispatch's vjp make it:
/// `pack` (a task) fills the E x C x M send buffer, the group's all-to-all
/// moves it, and `unpack` (a task) reads the received buffer. `unpack`
/// returns "" or the message the stream fails with: an error found while
/// packing is reported only here, after the all-to-all, so that no peer is
/// left waiting in it. Both buffers live until `unpack` has run.
moe_rt_status exchange(moe_rt_stream s, moe_rt_comm comm, const Route &r,
                       std::function<void(float *send)> pack,
                       std::function<std::string(const float *recv)> unpack) {
  auto send = std::make_shared<Scratch>(r.E, r.C, r.M),
       recv = std::make_shared<Scratch>(r.E, r.C, r.M);
  if (moe_rt_status st = task(s, [=] { pack(send->data.data()); }))
    return st;
  if (moe_rt_status st = moe_rt_all_to_all(s, comm, &send->view, &recv->view))
    return st;
  return s->impl->enqueueHost(
      [=](std::string &message) {
        message = unpack(recv->data.data());
        (void)send;
        return message.empty() ? MOE_RT_OK : MOE_RT_INVALID_ARGUMENT;
      },
      false);
}

//===----------------------------------------------------------------------===//
// Expert choice: slot (e, c) holds token indices[e, c] of this rank.
//===----------------------------------------------------------------------===//

/// A bad expert-choice index is found inside a task; the op then still
/// runs its all-to-alls (with zeros) and fails the stream in its last task,
/// so the group's other ranks are not left waiting in a collective.
struct EcError {
  std::string message;
  /// Records (and returns true for) the first bad index of `idx`.
  bool check(const char *call, const Route &r, const int64_t *idx) {
    int64_t bad = k::ecFirstBadIndex(r.E * r.C, idx, r.T);
    if (bad < 0)
      return false;
    message = std::string(call) + ": expert-choice index " +
              std::to_string(idx[bad]) + " (expert " +
              std::to_string(bad / r.C) + ", slot " +
              std::to_string(bad % r.C) + ") is not a token in [0, " +
              std::to_string(r.T) + ")";
    return true;
  }
};

/// The op's last task: `body`, then the deferred error if any.
moe_rt_status lastTask(moe_rt_stream s, std::shared_ptr<EcError> err,
                       std::function<void()> body) {
  return s->impl->enqueueHost(
      [err, body](std::string &message) {
        body();
        if (err->message.empty())
          return MOE_RT_OK;
        message = err->message;
        return MOE_RT_INVALID_ARGUMENT;
      },
      false);
}

moe_rt_status ecDispatch(moe_rt_stream s, moe_rt_comm comm, const Route &r,
                         const int64_t *idx, float *px, float *py) {
  auto err = std::make_shared<EcError>();
  return exchange(
      s, comm, r,
      [=](float *send) {
        if (!err->check("moe_rt_dispatch", r, idx))
          k::ecDispatchLayout(r.E, r.C, r.M, idx, px, send);
      },
      [=](const float *recv) {
        k::toExpertMajor(r.G, r.El, r.C, r.M, recv, py);
        return err->message;
      });
}

moe_rt_status ecDispatchGrad(moe_rt_stream s, moe_rt_comm comm, const Route &r,
                             const int64_t *idx, float *pd, float *pdx) {
  return exchange(
      s, comm, r,
      [=](float *send) { k::toRankMajor(r.G, r.El, r.C, r.M, pd, send); },
      [=](const float *recv) {
        EcError err;
        std::memset(pdx, 0, sizeof(float) * r.T * r.M);
        if (!err.check("moe_rt_dispatch_grad", r, idx))
          k::ecDispatchLayoutBackward(r.E, r.C, r.M, idx, recv, pdx);
        return err.message;
      });
}

moe_rt_status ecCombine(moe_rt_stream s, moe_rt_comm comm, const Route &r,
                        const int64_t *idx, float *pe, float *pw, float *py) {
  return exchange(
      s, comm, r,
      [=](float *send) { k::toRankMajor(r.G, r.El, r.C, r.M, pe, send); },
      [=](const float *recv) {
        EcError err;
        if (err.check("moe_rt_combine", r, idx))
          std::memset(py, 0, sizeof(float) * r.T * r.M);
        else
          k::ecCombineGather(r.T, r.E, r.C, r.M, idx, pw, recv, py);
        return err.message;
      });
}

moe_rt_status ecCombineGrad(moe_rt_stream s, moe_rt_comm comm, const Route &r,
                            const int64_t *idx, float *pe, float *pw,
                            float *pdy, float *pde, float *pdw) {
  auto err = std::make_shared<EcError>();
  auto send = std::make_shared<Scratch>(r.E, r.C, r.M),
       recv = std::make_shared<Scratch>(r.E, r.C, r.M),
       drecv = std::make_shared<Scratch>(r.E, r.C, r.M),
       dsend = std::make_shared<Scratch>(r.E, r.C, r.M);
  if (moe_rt_status st = task(s, [=] {
        k::toRankMajor(r.G, r.El, r.C, r.M, pe, send->data.data());
      }))
    return st;
  if (moe_rt_status st = moe_rt_all_to_all(s, comm, &send->view, &recv->view))
    return st;
  if (moe_rt_status st = task(s, [=] {
        std::memset(pdw, 0, sizeof(float) * r.E * r.C);
        if (!err->check("moe_rt_combine_grad", r, idx))
          k::ecCombineGatherBackward(r.E, r.C, r.M, idx, pw, recv->data.data(),
                                     pdy, drecv->data.data(), pdw);
        (void)send;
      }))
    return st;
  if (moe_rt_status st = moe_rt_all_to_all(s, comm, &drecv->view, &dsend->view))
    return st;
  return lastTask(s, err, [=] {
    k::toExpertMajor(r.G, r.El, r.C, r.M, dsend->data.data(), pde);
    (void)drecv;
  });
}

#if MOE_RT_HAVE_CUDA
device::RouteShape deviceRoute(const Route &r) {
  device::RouteShape d;
  d.T = r.T;
  d.k = r.k;
  d.E = r.E;
  d.G = r.G;
  d.El = r.El;
  d.C = r.C;
  d.M = r.M;
  d.ec = r.ec;
  return d;
}

#endif

} // namespace

extern "C" {

moe_rt_status moe_rt_dispatch(moe_rt_stream s, moe_rt_comm comm,
                              int64_t experts, int64_t capacity,
                              const moe_rt_tensor *x,
                              const moe_rt_tensor *indices,
                              moe_rt_tensor *out) {
  Route r{};
  if (moe_rt_status st = routeChecks("moe_rt_dispatch", s, comm, experts,
                                     capacity, indices, out, x, r))
    return st;
  MOE_RT_ON_CUDA(s, cuda::dispatch(s, comm, deviceRoute(r), f32(x),
                                   i64(indices), f32(out)));
  if (r.ec)
    return ecDispatch(s, comm, r, i64(indices), f32(x), f32(out));
  const int64_t *idx = i64(indices);
  float *px = f32(x), *py = f32(out);
  return exchange(
      s, comm, r,
      [=](float *send) {
        std::vector<int64_t> slots(r.T * r.k);
        k::routeTokens(r.T, r.E, r.k, r.C, idx, slots.data());
        k::dispatchLayout(r.T, r.k, r.E, r.C, r.M, idx, slots.data(), px, send);
      },
      [=](const float *recv) {
        k::toExpertMajor(r.G, r.El, r.C, r.M, recv, py);
        return std::string();
      });
}

moe_rt_status moe_rt_dispatch_grad(moe_rt_stream s, moe_rt_comm comm,
                                   int64_t experts, int64_t capacity,
                                   const moe_rt_tensor *indices,
                                   const moe_rt_tensor *dout,
                                   moe_rt_tensor *dx) {
  Route r{};
  if (moe_rt_status st = routeChecks("moe_rt_dispatch_grad", s, comm, experts,
                                     capacity, indices, dout, dx, r))
    return st;
  MOE_RT_ON_CUDA(s, cuda::dispatchGrad(s, comm, deviceRoute(r), i64(indices),
                                       f32(dout), f32(dx)));
  if (r.ec)
    return ecDispatchGrad(s, comm, r, i64(indices), f32(dout), f32(dx));
  const int64_t *idx = i64(indices);
  float *pd = f32(dout), *pdx = f32(dx);
  return exchange(
      s, comm, r,
      [=](float *send) { k::toRankMajor(r.G, r.El, r.C, r.M, pd, send); },
      [=](const float *recv) {
        std::vector<int64_t> slots(r.T * r.k);
        std::memset(pdx, 0, sizeof(float) * r.T * r.M);
        k::routeTokens(r.T, r.E, r.k, r.C, idx, slots.data());
        k::dispatchLayoutBackward(r.T, r.k, r.C, r.M, idx, slots.data(), recv,
                                  pdx);
        return std::string();
      });
}

moe_rt_status moe_rt_combine(moe_rt_stream s, moe_rt_comm comm, int64_t experts,
                             int64_t capacity, const moe_rt_tensor *expert_out,
                             const moe_rt_tensor *indices,
                             const moe_rt_tensor *weights, moe_rt_tensor *out) {
  Route r{};
  if (moe_rt_status st = routeChecks("moe_rt_combine", s, comm, experts,
                                     capacity, indices, expert_out, out, r))
    return st;
  if (!isOn(weights, MOE_RT_F32, backendOf(s)) ||
      moe_rt_tensor_numel(weights) != moe_rt_tensor_numel(indices))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_combine: weights must match indices");
  MOE_RT_ON_CUDA(s, cuda::combine(s, comm, deviceRoute(r), f32(expert_out),
                                  i64(indices), f32(weights), f32(out)));
  if (r.ec)
    return ecCombine(s, comm, r, i64(indices), f32(expert_out), f32(weights),
                     f32(out));
  const int64_t *idx = i64(indices);
  float *pe = f32(expert_out), *pw = f32(weights), *py = f32(out);
  return exchange(
      s, comm, r,
      [=](float *send) { k::toRankMajor(r.G, r.El, r.C, r.M, pe, send); },
      [=](const float *recv) {
        std::vector<int64_t> slots(r.T * r.k);
        k::routeTokens(r.T, r.E, r.k, r.C, idx, slots.data());
        k::combineGather(r.T, r.k, r.C, r.M, idx, slots.data(), pw, recv, py);
        return std::string();
      });
}

moe_rt_status
moe_rt_combine_grad(moe_rt_stream s, moe_rt_comm comm, int64_t experts,
                    int64_t capacity, const moe_rt_tensor *expert_out,
                    const moe_rt_tensor *indices, const moe_rt_tensor *weights,
                    const moe_rt_tensor *dout, moe_rt_tensor *dexpert_out,
                    moe_rt_tensor *dweights) {
  Route r{};
  if (moe_rt_status st = routeChecks("moe_rt_combine_grad", s, comm, experts,
                                     capacity, indices, expert_out, dout, r))
    return st;
  if (!isOn(weights, MOE_RT_F32, backendOf(s)) ||
      !isOn(dweights, MOE_RT_F32, backendOf(s)) ||
      !isOn(dexpert_out, MOE_RT_F32, backendOf(s)) ||
      moe_rt_tensor_numel(dexpert_out) != moe_rt_tensor_numel(expert_out) ||
      moe_rt_tensor_numel(weights) != moe_rt_tensor_numel(indices) ||
      moe_rt_tensor_numel(dweights) != moe_rt_tensor_numel(indices))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_combine_grad: bad weights or gradient tensors");
  MOE_RT_ON_CUDA(s, cuda::combineGrad(s, comm, deviceRoute(r), f32(expert_out),
                                      i64(indices), f32(weights), f32(dout),
                                      f32(dexpert_out), f32(dweights)));
  if (r.ec)
    return ecCombineGrad(s, comm, r, i64(indices), f32(expert_out),
                         f32(weights), f32(dout), f32(dexpert_out),
                         f32(dweights));
  auto slots = std::make_shared<std::vector<int64_t>>(r.T * r.k);
  auto send = std::make_shared<Scratch>(r.E, r.C, r.M),
       recv = std::make_shared<Scratch>(r.E, r.C, r.M),
       drecv = std::make_shared<Scratch>(r.E, r.C, r.M),
       dsend = std::make_shared<Scratch>(r.E, r.C, r.M);
  const int64_t *idx = i64(indices);
  float *pe = f32(expert_out), *pw = f32(weights), *pdy = f32(dout),
        *pde = f32(dexpert_out), *pdw = f32(dweights);
  if (moe_rt_status st = task(s, [=] {
        k::toRankMajor(r.G, r.El, r.C, r.M, pe, send->data.data());
      }))
    return st;
  if (moe_rt_status st = moe_rt_all_to_all(s, comm, &send->view, &recv->view))
    return st;
  if (moe_rt_status st = task(s, [=] {
        k::routeTokens(r.T, r.E, r.k, r.C, idx, slots->data());
        std::memset(pdw, 0, sizeof(float) * r.T * r.k);
        k::combineGatherBackward(r.T, r.k, r.C, r.M, idx, slots->data(), pw,
                                 recv->data.data(), pdy, drecv->data.data(),
                                 pdw);
        (void)send;
      }))
    return st;
  if (moe_rt_status st = moe_rt_all_to_all(s, comm, &drecv->view, &dsend->view))
    return st;
  return task(s, [=] {
    k::toExpertMajor(r.G, r.El, r.C, r.M, dsend->data.data(), pde);
    (void)drecv;
  });
}

moe_rt_status moe_rt_add(moe_rt_stream s, const moe_rt_tensor *a,
                         const moe_rt_tensor *b, moe_rt_tensor *out) {
  if (!s || !isOn(a, MOE_RT_F32, backendOf(s)) ||
      !isOn(b, MOE_RT_F32, backendOf(s)) ||
      !isOn(out, MOE_RT_F32, backendOf(s)) ||
      moe_rt_tensor_numel(a) != moe_rt_tensor_numel(b) ||
      moe_rt_tensor_numel(a) != moe_rt_tensor_numel(out))
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_add: needs three F32 tensors "
                                         "of one size on the stream's backend");
  int64_t n = moe_rt_tensor_numel(a);
  float *pa = f32(a), *pb = f32(b), *po = f32(out);
  MOE_RT_ON_CUDA(s, cuda::add(s, n, pa, pb, po));
  return task(s, [=] {
    for (int64_t i = 0; i < n; ++i)
      po[i] = pa[i] + pb[i];
  });
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
  size_t size = moe_rt_dtype_size(src->dtype);
  MOE_RT_ON_CUDA(s, cuda::copy(s, src->data, src_offset, dst->data, dst_offset,
                               count, size));
  const char *from = static_cast<const char *>(src->data) + src_offset * size;
  char *to = static_cast<char *>(dst->data) + dst_offset * size;
  return task(s, [=] { std::memcpy(to, from, count * size); });
}

moe_rt_status moe_rt_sgd(moe_rt_stream s, const moe_rt_tensor *param,
                         const moe_rt_tensor *grad, double lr,
                         moe_rt_tensor *out) {
  if (!s || !isOn(param, MOE_RT_F32, backendOf(s)) ||
      !isOn(grad, MOE_RT_F32, backendOf(s)) ||
      !isOn(out, MOE_RT_F32, backendOf(s)) ||
      moe_rt_tensor_numel(param) != moe_rt_tensor_numel(grad) ||
      moe_rt_tensor_numel(param) != moe_rt_tensor_numel(out))
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_sgd: needs three F32 tensors "
                                         "of one size on the stream's backend");
  int64_t n = moe_rt_tensor_numel(param);
  float *pp = f32(param), *pg = f32(grad), *po = f32(out);
  float step = float(lr);
  MOE_RT_ON_CUDA(s, cuda::sgd(s, n, pp, pg, lr, po));
  return task(s, [=] {
    for (int64_t i = 0; i < n; ++i)
      po[i] = pp[i] - step * pg[i];
  });
}

moe_rt_status moe_rt_all_reduce_into(moe_rt_stream s, moe_rt_comm comm,
                                     const moe_rt_tensor *src,
                                     moe_rt_tensor *out, int64_t offset_bytes,
                                     int64_t size_bytes) {
  if (!s || !comm || !isOn(src, MOE_RT_F32, backendOf(s)) ||
      !isOn(out, MOE_RT_F32, backendOf(s)) ||
      moe_rt_tensor_numel(src) != moe_rt_tensor_numel(out))
    return fail(
        MOE_RT_INVALID_ARGUMENT,
        "moe_rt_all_reduce_into: needs F32 tensors of one size on the stream's "
        "backend");
  int64_t n = moe_rt_tensor_numel(src);
  float *ps = f32(src), *po = f32(out);
#if MOE_RT_HAVE_CUDA
  if (backendOf(s) == MOE_RT_CUDA) {
    if (moe_rt_status st = cuda::copy(s, ps, 0, po, 0, n, sizeof(float),
                                      /*lowPriority=*/true))
      return st;
    return moe_rt_all_reduce(s, comm, out, offset_bytes, size_bytes);
  }
#endif
  // The copy joins the all-reduce in the pool's low-priority queue, so that
  // a wait before this op gates both.
  if (moe_rt_status st = s->impl->enqueueHost(
          [=](std::string &) {
            std::memcpy(po, ps, sizeof(float) * n);
            return MOE_RT_OK;
          },
          /*lowPriority=*/true))
    return st;
  return moe_rt_all_reduce(s, comm, out, offset_bytes, size_bytes);
}

} // extern "C"
