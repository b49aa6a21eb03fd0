//===- CpuRoutingOps.cpp - dispatch, combine and their vjps on the CPU ----===//
//
// moe.dispatch / moe.combine and their vjps: the routing kernels
// (kernels/Routing.h) as tasks around the group's all-to-all, queued in
// order on one communication stream. The vjp of combine brings the expert
// outputs to the tokens' ranks again rather than keeping them from the
// forward (one more all-to-all, no saved state). Expert-choice routing
// (E x C indices, kernels/ExpertChoice.h) fills and reads the same
// E x C x M buffers around the same all-to-all.
//
//===----------------------------------------------------------------------===//

#include "CpuOps.h"
#include "CpuTasks.h"

#include "kernels/ExpertChoice.h"
#include "kernels/Routing.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace moe_rt::cpu {
namespace {
namespace k = moe_rt::kernels;
using Route = RouteShape;

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

/// Token choice's slots of r's window [O, O + C): every slot in [0, C).
void routeWindow(const Route &r, const int64_t *idx, int64_t *slots) {
  k::routeTokens(r.T, r.E, r.k, r.O + r.C, idx, slots);
  if (r.O > 0)
    k::windowSlots(r.T * r.k, r.O, slots);
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

} // namespace

moe_rt_status dispatch(moe_rt_stream s, moe_rt_comm comm, const Route &r,
                       const moe_rt_tensor *x, const moe_rt_tensor *indices,
                       moe_rt_tensor *out) {  if (r.ec)
    return ecDispatch(s, comm, r, i64(indices), f32(x), f32(out));
  const int64_t *idx = i64(indices);
  float *px = f32(x), *py = f32(out);
  return exchange(
      s, comm, r,
      [=](float *send) {
        std::vector<int64_t> slots(r.T * r.k);
        routeWindow(r, idx, slots.data());
        k::dispatchLayout(r.T, r.k, r.E, r.C, r.M, idx, slots.data(), px, send);
      },
      [=](const float *recv) {
        k::toExpertMajor(r.G, r.El, r.C, r.M, recv, py);
        return std::string();
      });
}

moe_rt_status dispatchGrad(moe_rt_stream s, moe_rt_comm comm, const Route &r,
                           const moe_rt_tensor *indices,
                           const moe_rt_tensor *dout, moe_rt_tensor *dx) {  if (r.ec)
    return ecDispatchGrad(s, comm, r, i64(indices), f32(dout), f32(dx));
  const int64_t *idx = i64(indices);
  float *pd = f32(dout), *pdx = f32(dx);
  return exchange(
      s, comm, r,
      [=](float *send) { k::toRankMajor(r.G, r.El, r.C, r.M, pd, send); },
      [=](const float *recv) {
        std::vector<int64_t> slots(r.T * r.k);
        std::memset(pdx, 0, sizeof(float) * r.T * r.M);
        routeWindow(r, idx, slots.data());
        k::dispatchLayoutBackward(r.T, r.k, r.C, r.M, idx, slots.data(), recv,
                                  pdx);
        return std::string();
      });
}

moe_rt_status combine(moe_rt_stream s, moe_rt_comm comm, const Route &r,
                      const moe_rt_tensor *expert_out,
                      const moe_rt_tensor *indices,
                      const moe_rt_tensor *weights, moe_rt_tensor *out) {  if (r.ec)
    return ecCombine(s, comm, r, i64(indices), f32(expert_out), f32(weights),
                     f32(out));
  const int64_t *idx = i64(indices);
  float *pe = f32(expert_out), *pw = f32(weights), *py = f32(out);
  return exchange(
      s, comm, r,
      [=](float *send) { k::toRankMajor(r.G, r.El, r.C, r.M, pe, send); },
      [=](const float *recv) {
        std::vector<int64_t> slots(r.T * r.k);
        routeWindow(r, idx, slots.data());
        k::combineGather(r.T, r.k, r.C, r.M, idx, slots.data(), pw, recv, py);
        return std::string();
      });
}

moe_rt_status combineGrad(moe_rt_stream s, moe_rt_comm comm, const Route &r,
                          const moe_rt_tensor *expert_out,
                          const moe_rt_tensor *indices,
                          const moe_rt_tensor *weights,
                          const moe_rt_tensor *dout,
                          moe_rt_tensor *dexpert_out,
                          moe_rt_tensor *dweights) {  if (r.ec)
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
        routeWindow(r, idx, slots->data());
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

} // namespace moe_rt::cpu
