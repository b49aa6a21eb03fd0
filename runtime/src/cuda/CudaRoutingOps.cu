//===- CudaRoutingOps.cu - gates, routing and experts on a CUDA stream ----===//
//
// The src/device op templates instantiated for CudaExecutor. One executor
// per call: its scratch (the all-to-all's send/recv buffers included) is
// freed stream-ordered when the call returns, after every kernel and the
// all-to-all(s) that use it were queued on the stream.
//
//===----------------------------------------------------------------------===//

#include "CudaRoutingOps.h"

#include "CudaExecutor.h"

namespace moe_rt::cuda {

using device::CudaExecutor;

namespace {

/// A CUDA tensor view of an E x C x M scratch buffer, for moe_rt_all_to_all
/// (it splits dimension 0 over the group: El experts per rank).
moe_rt_tensor bufferView(float *data, const RouteShape &r) {
  moe_rt_tensor t{};
  t.data = data;
  t.rank = 3;
  t.shape[0] = r.E;
  t.shape[1] = r.C;
  t.shape[2] = r.M;
  t.dtype = MOE_RT_F32;
  t.backend = MOE_RT_CUDA;
  return t;
}

/// Token choice's slots (T x k), or expert choice's token -> slot table
/// (T x E).
int64_t slotsSize(const RouteShape &r) { return r.ec ? r.T * r.E : r.T * r.k; }

/// recv = the group's all-to-all of send (both E x C x M), on s.
moe_rt_status exchange(moe_rt_stream s, moe_rt_comm comm, const RouteShape &r,
                       float *send, float *recv) {
  moe_rt_tensor sendView = bufferView(send, r), recvView = bufferView(recv, r);
  return moe_rt_all_to_all(s, comm, &sendView, &recvView);
}

} // namespace

moe_rt_status gate(moe_rt_stream s, const GateShape &z, const float *x,
                   const float *w, const float *aux, int64_t *indices,
                   float *weights, int64_t *counts) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  return device::gateForward(ex, z, x, w, aux, indices, weights, counts);
}

moe_rt_status gateGrad(moe_rt_stream s, const GateShape &z, const float *x,
                       const float *w, const float *aux,
                       const float *dweights, float *dx, float *dw,
                       float *daux) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  return device::gateBackward(ex, z, x, w, aux, dweights, dx, dw, daux);
}

moe_rt_status expert(moe_rt_stream s, moe_rt_activation act,
                     const ExpertShape &f, const float *x, const float *up,
                     const float *gate, const float *down, float *out) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  return device::expertForward(ex, act, f, x, up, gate, down, out);
}

moe_rt_status expertGrad(moe_rt_stream s, moe_rt_activation act,
                         const ExpertShape &f, const float *x, const float *up,
                         const float *gate, const float *down,
                         const float *dout, float *dx, float *dup, float *dgate,
                         float *ddown) {
  CudaExecutor ex(s);
  if (ex.status())
    return ex.status();
  return device::expertBackward(ex, act, f, x, up, gate, down, dout, dx, dup,
                                dgate, ddown);
}

moe_rt_status dispatch(moe_rt_stream s, moe_rt_comm comm, const RouteShape &r,
                       const float *x, const int64_t *indices, float *out) {
  CudaExecutor ex(s);
  int64_t *slots = ex.scratchI64(slotsSize(r));
  float *send = ex.scratchF32(r.E * r.C * r.M),
        *recv = ex.scratchF32(r.E * r.C * r.M);
  if (ex.status())
    return ex.status();
  if (r.ec ? device::ecDispatchSend(ex, r, x, indices, send)
           : device::dispatchSend(ex, r, x, indices, slots, send))
    return ex.status();
  if (moe_rt_status st = exchange(s, comm, r, send, recv))
    return st;
  return device::dispatchRecv(ex, r, recv, out);
}

moe_rt_status dispatchGrad(moe_rt_stream s, moe_rt_comm comm,
                           const RouteShape &r, const int64_t *indices,
                           const float *dout, float *dx) {
  CudaExecutor ex(s);
  int64_t *slots = ex.scratchI64(slotsSize(r));
  float *send = ex.scratchF32(r.E * r.C * r.M),
        *recv = ex.scratchF32(r.E * r.C * r.M);
  if (ex.status())
    return ex.status();
  if (device::dispatchGradSend(ex, r, dout, send))
    return ex.status();
  if (moe_rt_status st = exchange(s, comm, r, send, recv))
    return st;
  return r.ec ? device::ecDispatchGradRecv(ex, r, indices, slots, recv, dx)
              : device::dispatchGradRecv(ex, r, indices, slots, recv, dx);
}

moe_rt_status combine(moe_rt_stream s, moe_rt_comm comm, const RouteShape &r,
                      const float *expertOut, const int64_t *indices,
                      const float *weights, float *out) {
  CudaExecutor ex(s);
  int64_t *slots = ex.scratchI64(slotsSize(r));
  float *send = ex.scratchF32(r.E * r.C * r.M),
        *recv = ex.scratchF32(r.E * r.C * r.M);
  if (ex.status())
    return ex.status();
  if (device::combineSend(ex, r, expertOut, send))
    return ex.status();
  if (moe_rt_status st = exchange(s, comm, r, send, recv))
    return st;
  return r.ec ? device::ecCombineRecv(ex, r, indices, slots, weights, recv,
                                      out)
              : device::combineRecv(ex, r, indices, slots, weights, recv, out);
}

moe_rt_status combineGrad(moe_rt_stream s, moe_rt_comm comm,
                          const RouteShape &r, const float *expertOut,
                          const int64_t *indices, const float *weights,
                          const float *dout, float *dexpertOut,
                          float *dweights) {
  CudaExecutor ex(s);
  int64_t n = r.E * r.C * r.M;
  int64_t *slots = ex.scratchI64(slotsSize(r));
  float *send = ex.scratchF32(n), *recv = ex.scratchF32(n),
        *drecv = ex.scratchF32(n), *dsend = ex.scratchF32(n);
  if (ex.status())
    return ex.status();
  // The expert outputs travel to the tokens' ranks again (no saved state),
  // the gradient rows back: two exchanges, as the CPU op.
  if (device::combineSend(ex, r, expertOut, send))
    return ex.status();
  if (moe_rt_status st = exchange(s, comm, r, send, recv))
    return st;
  if (r.ec ? device::ecCombineGradMid(ex, r, indices, weights, recv, dout,
                                      drecv, dweights)
           : device::combineGradMid(ex, r, indices, slots, weights, recv, dout,
                                    drecv, dweights))
    return ex.status();
  if (moe_rt_status st = exchange(s, comm, r, drecv, dsend))
    return st;
  return device::combineGradRecv(ex, r, dsend, dexpertOut);
}

} // namespace moe_rt::cuda
