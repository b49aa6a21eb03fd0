//===- RoutingOps.h - dispatch / combine layouts, any executor --*- C++ -*-===//
//
// The token side of moe_rt_dispatch / moe_rt_combine and their vjps for the
// CUDA backend, as kernels/Routing.h does it on the CPU, written over an
// executor (Device.h) so that CI checks it on the host:
//  - routeTokens: capacity slots in GShard order (every token's first choice
//    before any second choice, tokens in order): per-chunk counts, their
//    prefix per expert, a scan inside the chunk; deterministic, without a
//    sort or atomics.
//  - dispatchLayout / combineGather and their adjoints; every (expert, slot)
//    holds at most one (token, choice), so no body races another.
//  - toExpertMajor / toRankMajor.
//  - expert choice (kernels/ExpertChoice.h): slot (e, c) holds token
//    indices[e, c]; the same send layout, so the transposes and the
//    exchanges are shared, and the phases below have ec* variants.
// Each op is then split into its phases around the all-to-all(s), in the
// order src/cpu/CpuRoutingOps.cpp queues them: `...Send` before the exchange,
// `...Recv` after it (combineGradMid between combine_grad's two). The CUDA
// entry points (src/cuda/CudaRoutingOps.cu) run a phase, moe_rt_all_to_all,
// the next phase; the host test runs the phases of G simulated ranks around
// an in-memory exchange.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_DEVICE_ROUTINGOPS_H
#define MOE_RT_SRC_DEVICE_ROUTINGOPS_H

#include "Device.h"

#include "../OpShapes.h"

#include "moe_rt/moe_rt.h"

#include <cstdint>

namespace moe_rt::device {

namespace routing {

// routeTokens in parallel, deterministically: the GShard order is the
// sequence of positions p = j T + t (choice-major). A pair's slot is the
// number of earlier positions with the same expert, counted in three
// launches: per (chunk of positions, expert) counts, their exclusive
// prefix over chunks per expert, then each position adds the matches
// before it inside its own chunk.

/// counts[b E + e] = how many positions of chunk b pick expert e.
struct ChunkCounts {
  int64_t tokens, k, E, chunk;
  const int64_t *indices;
  int64_t *counts;
  MOE_HD void operator()(int64_t i) const {
    int64_t b = i / E, e = i % E, n = tokens * k, found = 0;
    int64_t end = (b + 1) * chunk < n ? (b + 1) * chunk : n;
    for (int64_t p = b * chunk; p < end; ++p)
      found += indices[(p % tokens) * k + p / tokens] == e;
    counts[i] = found;
  }
};

/// counts[b E + e] becomes the number of positions of chunks < b that pick
/// e (one body per expert, serial over the chunks).
struct ChunkOffsets {
  int64_t E, chunks;
  int64_t *counts;
  MOE_HD void operator()(int64_t e) const {
    int64_t running = 0;
    for (int64_t b = 0; b < chunks; ++b) {
      int64_t v = counts[b * E + e];
      counts[b * E + e] = running;
      running += v;
    }
  }
};

/// The slot of position p (-1 over capacity). An index outside [0, E)
/// gets no slot and fails the stream (the CPU kernels trust their
/// indices; a GPU must not write out of bounds).
struct PlaceInChunk {
  int64_t tokens, k, E, C, chunk;
  const int64_t *indices, *offsets;
  int64_t *slots;
  int32_t *word;
  int32_t code;
  MOE_HD void operator()(int64_t p) const {
    int64_t tj = (p % tokens) * k + p / tokens, e = indices[tj];
    if (e < 0 || e >= E) {
      slots[tj] = -1;
      raiseError(word, code);
      return;
    }
    int64_t b = p / chunk, s = offsets[b * E + e];
    for (int64_t q = b * chunk; q < p; ++q)
      s += indices[(q % tokens) * k + q / tokens] == e;
    slots[tj] = s < C ? s : -1;
  }
};

/// kernels::windowSlots: slot s >= first becomes s - first, others -1.
struct WindowSlots {
  int64_t first;
  int64_t *slots;
  MOE_HD void operator()(int64_t i) const {
    slots[i] = slots[i] >= first ? slots[i] - first : -1;
  }
};

/// send[(e C + s) M + col] = x[t M + col] for each kept (t, j).
struct DispatchRows {
  int64_t k, C, M;
  const int64_t *indices, *slots;
  const float *x;
  float *send;
  MOE_HD void operator()(int64_t i) const {
    int64_t tj = i / M, col = i % M;
    int64_t s = slots[tj];
    if (s >= 0)
      send[(indices[tj] * C + s) * M + col] = x[(tj / k) * M + col];
  }
};

/// dx[t, col] += dsend[slot of (t, j)] over kept j, in order.
struct DispatchRowsBack {
  int64_t k, C, M;
  const int64_t *indices, *slots;
  const float *dsend;
  float *dx;
  MOE_HD void operator()(int64_t i) const {
    int64_t t = i / M, col = i % M;
    float acc = dx[i];
    for (int64_t j = 0; j < k; ++j) {
      int64_t s = slots[t * k + j];
      if (s >= 0)
        acc += dsend[(indices[t * k + j] * C + s) * M + col];
    }
    dx[i] = acc;
  }
};

/// y[t, col] = sum over kept j of w[t, j] recv[slot], in order (float).
struct CombineRows {
  int64_t k, C, M;
  const int64_t *indices, *slots;
  const float *weights, *recv;
  float *y;
  MOE_HD void operator()(int64_t i) const {
    int64_t t = i / M, col = i % M;
    float acc = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t s = slots[t * k + j];
      if (s >= 0)
        acc += weights[t * k + j] * recv[(indices[t * k + j] * C + s) * M + col];
    }
    y[i] = acc;
  }
};

/// drecv[slot] += w[t, j] dy[t] (each slot has one (t, j)).
struct CombineRowsBackRecv {
  int64_t k, C, M;
  const int64_t *indices, *slots;
  const float *weights, *dy;
  float *drecv;
  MOE_HD void operator()(int64_t i) const {
    int64_t tj = i / M, col = i % M;
    int64_t s = slots[tj];
    if (s >= 0)
      drecv[(indices[tj] * C + s) * M + col] +=
          weights[tj] * dy[(tj / k) * M + col];
  }
};

/// dweights[t, j] += <dy[t], recv[slot]> (double sum).
struct CombineRowsBackWeights {
  int64_t k, C, M;
  const int64_t *indices, *slots;
  const float *recv, *dy;
  float *dweights;
  MOE_HD void operator()(int64_t tj) const {
    int64_t s = slots[tj];
    if (s < 0)
      return;
    const float *src = recv + (indices[tj] * C + s) * M;
    const float *d = dy + (tj / k) * M;
    double acc = 0;
    for (int64_t col = 0; col < M; ++col)
      acc += d[col] * src[col];
    dweights[tj] += float(acc);
  }
};

struct FillI64 {
  int64_t *p;
  int64_t v;
  MOE_HD void operator()(int64_t i) const { p[i] = v; }
};

/// Block (a, b) of an A x B grid of blocks of `block` floats goes to block
/// (b, a) of the B x A grid: toExpertMajor is (G, El) -> (El, G),
/// toRankMajor (El, G) -> (G, El).
struct SwapBlocks {
  int64_t A, B, block;
  const float *in;
  float *out;
  MOE_HD void operator()(int64_t i) const {
    int64_t q = i / block, r = i % block;
    int64_t a = q / B, b = q % B;
    out[(b * A + a) * block + r] = in[i];
  }
};

//===--- expert choice (kernels/ExpertChoice.h) ---===//
// Slot s = (e, c) holds token indices[s] (-1: empty). A token sits in at
// most one slot of each expert (the gate picks distinct tokens), so the
// token side reads a T x E table of each token's slot per expert (-1:
// none) and sums over experts in order, as the CPU's loop over slots does,
// without atomics.

/// Fails the stream for an index that is neither -1 nor a token id.
struct EcCheck {
  int64_t T;
  const int64_t *indices;
  int32_t *word;
  int32_t code;
  MOE_HD void operator()(int64_t s) const {
    if (indices[s] < -1 || indices[s] >= T)
      raiseError(word, code);
  }
};

/// table[t E + e] = c for slot (e, c) holding token t (table preset -1).
struct EcSlotTable {
  int64_t T, E, C;
  const int64_t *indices;
  int64_t *table;
  MOE_HD void operator()(int64_t s) const {
    int64_t t = indices[s];
    if (t >= 0 && t < T)
      table[t * E + s / C] = s % C;
  }
};

/// send[s] = x[indices[s]] (empty slots stay zero).
struct EcDispatchRows {
  int64_t T, M;
  const int64_t *indices;
  const float *x;
  float *send;
  MOE_HD void operator()(int64_t i) const {
    int64_t t = indices[i / M];
    if (t >= 0 && t < T)
      send[i] = x[t * M + i % M];
  }
};

/// out[t, col] (+)= sum over the slots s holding t of (w[s]) src[s, col],
/// experts in order; w null for a plain sum (dispatch's adjoint).
struct EcGatherRows {
  int64_t E, C, M;
  const int64_t *table;
  const float *w, *src;
  bool accumulate;
  float *out;
  MOE_HD void operator()(int64_t i) const {
    int64_t t = i / M, col = i % M;
    float acc = accumulate ? out[i] : 0.0f;
    for (int64_t e = 0; e < E; ++e) {
      int64_t c = table[t * E + e];
      if (c < 0)
        continue;
      int64_t s = e * C + c;
      if (w)
        acc += w[s] * src[s * M + col];
      else
        acc += src[s * M + col];
    }
    out[i] = acc;
  }
};

/// drecv[s] += w[s] dy[indices[s]].
struct EcCombineBackRecv {
  int64_t T, M;
  const int64_t *indices;
  const float *weights, *dy;
  float *drecv;
  MOE_HD void operator()(int64_t i) const {
    int64_t s = i / M, t = indices[s];
    if (t >= 0 && t < T)
      drecv[i] += weights[s] * dy[t * M + i % M];
  }
};

/// dweights[s] += <dy[indices[s]], recv[s]> (double products and sum).
struct EcCombineBackWeights {
  int64_t T, M;
  const int64_t *indices;
  const float *recv, *dy;
  float *dweights;
  MOE_HD void operator()(int64_t s) const {
    int64_t t = indices[s];
    if (t < 0 || t >= T)
      return;
    double d = 0;
    for (int64_t col = 0; col < M; ++col)
      d += double(dy[t * M + col]) * recv[s * M + col];
    dweights[s] += float(d);
  }
};

} // namespace routing

//===--- the kernels of Routing.h --------------------------------------===//

/// Positions per chunk of routeTokens: small enough that a position's scan
/// of its chunk is short, large enough that the per-expert prefix over
/// chunks is too.
constexpr int64_t kRouteChunk = 256;

/// slots (tokens x k) of kernels::routeTokens; an index outside [0, E)
/// fails the executor's stream. `chunk` only changes the work split (the
/// tests vary it).
template <class X>
moe_rt_status routeTokens(X &ex, int64_t tokens, int64_t E, int64_t k,
                          int64_t C, const int64_t *indices, int64_t *slots,
                          int64_t chunk = kRouteChunk) {
  int64_t n = tokens * k, chunks = (n + chunk - 1) / chunk;
  int32_t code = ex.errorCode("routing: an expert index is outside [0, E)");
  int64_t *counts = ex.scratchI64(chunks * E);
  if (ex.status())
    return ex.status();
  ex.forEach(chunks * E,
             routing::ChunkCounts{tokens, k, E, chunk, indices, counts});
  ex.forEach(E, routing::ChunkOffsets{E, chunks, counts});
  return ex.forEach(n, routing::PlaceInChunk{tokens, k, E, C, chunk, indices,
                                             counts, slots, ex.errorWord(),
                                             code});
}

/// The slots of r's window [O, O + C) (token choice), as the CPU's
/// routeTokens + windowSlots.
template <class X>
moe_rt_status routeWindow(X &ex, const RouteShape &r, const int64_t *indices,
                          int64_t *slots) {
  if (routeTokens(ex, r.T, r.E, r.k, r.O + r.C, indices, slots) || r.O == 0)
    return ex.status();
  return ex.forEach(r.T * r.k, routing::WindowSlots{r.O, slots});
}

/// send (E x C x M) overwritten; empty slots zero.
template <class X>
moe_rt_status dispatchLayout(X &ex, const RouteShape &r, const int64_t *indices,
                             const int64_t *slots, const float *x,
                             float *send) {
  ex.zero(send, sizeof(float) * r.E * r.C * r.M);
  ex.forEach(r.T * r.k * r.M,
             routing::DispatchRows{r.k, r.C, r.M, indices, slots, x, send});
  return ex.status();
}

/// dx accumulated.
template <class X>
moe_rt_status dispatchLayoutBackward(X &ex, const RouteShape &r,
                                     const int64_t *indices,
                                     const int64_t *slots, const float *dsend,
                                     float *dx) {
  return ex.forEach(r.T * r.M, routing::DispatchRowsBack{r.k, r.C, r.M, indices,
                                                         slots, dsend, dx});
}

/// y (T x M) overwritten.
template <class X>
moe_rt_status combineGather(X &ex, const RouteShape &r, const int64_t *indices,
                            const int64_t *slots, const float *weights,
                            const float *recv, float *y) {
  return ex.forEach(r.T * r.M, routing::CombineRows{r.k, r.C, r.M, indices,
                                                    slots, weights, recv, y});
}

/// drecv and dweights accumulated.
template <class X>
moe_rt_status combineGatherBackward(X &ex, const RouteShape &r,
                                    const int64_t *indices,
                                    const int64_t *slots, const float *weights,
                                    const float *recv, const float *dy,
                                    float *drecv, float *dweights) {
  ex.forEach(r.T * r.k * r.M, routing::CombineRowsBackRecv{
                                  r.k, r.C, r.M, indices, slots, weights, dy,
                                  drecv});
  return ex.forEach(r.T * r.k, routing::CombineRowsBackWeights{
                                   r.k, r.C, r.M, indices, slots, recv, dy,
                                   dweights});
}

/// in: G x El x C x M -> out: El x G x C x M.
template <class X>
moe_rt_status toExpertMajor(X &ex, const RouteShape &r, const float *in,
                            float *out) {
  return ex.forEach(r.E * r.C * r.M,
                    routing::SwapBlocks{r.G, r.El, r.C * r.M, in, out});
}

/// in: El x G x C x M -> out: G x El x C x M.
template <class X>
moe_rt_status toRankMajor(X &ex, const RouteShape &r, const float *in,
                          float *out) {
  return ex.forEach(r.E * r.C * r.M,
                    routing::SwapBlocks{r.El, r.G, r.C * r.M, in, out});
}

//===--- the ops' phases around the all-to-all ---------------------------===//
// send / recv / drecv / dsend are E x C x M buffers; slots T x k. The
// exchange between phases: part g (El x C x M) of send goes to rank g,
// part g of recv comes from rank g.

/// moe_rt_dispatch, before: slots, and x laid out into send.
template <class X>
moe_rt_status dispatchSend(X &ex, const RouteShape &r, const float *x,
                           const int64_t *indices, int64_t *slots,
                           float *send) {
  if (routeWindow(ex, r, indices, slots))
    return ex.status();
  return dispatchLayout(ex, r, indices, slots, x, send);
}

/// moe_rt_dispatch, after: out (El x G C x M) from recv.
template <class X>
moe_rt_status dispatchRecv(X &ex, const RouteShape &r, const float *recv,
                           float *out) {
  return toExpertMajor(ex, r, recv, out);
}

/// moe_rt_dispatch_grad, before: dout to rank-major.
template <class X>
moe_rt_status dispatchGradSend(X &ex, const RouteShape &r, const float *dout,
                               float *send) {
  return toRankMajor(ex, r, dout, send);
}

/// moe_rt_dispatch_grad, after: dx (overwritten) from the returned rows.
template <class X>
moe_rt_status dispatchGradRecv(X &ex, const RouteShape &r,
                               const int64_t *indices, int64_t *slots,
                               const float *recv, float *dx) {
  ex.zero(dx, sizeof(float) * r.T * r.M);
  if (routeWindow(ex, r, indices, slots))
    return ex.status();
  return dispatchLayoutBackward(ex, r, indices, slots, recv, dx);
}

/// moe_rt_combine (and combine_grad's first exchange), before: the expert
/// outputs to rank-major.
template <class X>
moe_rt_status combineSend(X &ex, const RouteShape &r, const float *expertOut,
                          float *send) {
  return toRankMajor(ex, r, expertOut, send);
}

/// moe_rt_combine, after: out (T x M) = the weighted sum of the kept rows.
template <class X>
moe_rt_status combineRecv(X &ex, const RouteShape &r, const int64_t *indices,
                          int64_t *slots, const float *weights,
                          const float *recv, float *out) {
  if (routeWindow(ex, r, indices, slots))
    return ex.status();
  return combineGather(ex, r, indices, slots, weights, recv, out);
}

/// moe_rt_combine_grad, between its exchanges: dweights (overwritten) and
/// drecv (zeroed, then the rows to send back).
template <class X>
moe_rt_status combineGradMid(X &ex, const RouteShape &r,
                             const int64_t *indices, int64_t *slots,
                             const float *weights, const float *recv,
                             const float *dout, float *drecv,
                             float *dweights) {
  if (routeWindow(ex, r, indices, slots))
    return ex.status();
  ex.zero(dweights, sizeof(float) * r.T * r.k);
  ex.zero(drecv, sizeof(float) * r.E * r.C * r.M);
  return combineGatherBackward(ex, r, indices, slots, weights, recv, dout,
                               drecv, dweights);
}

/// moe_rt_combine_grad, after: dexpert_out (El x G C x M) from dsend.
template <class X>
moe_rt_status combineGradRecv(X &ex, const RouteShape &r, const float *dsend,
                              float *dexpertOut) {
  return toExpertMajor(ex, r, dsend, dexpertOut);
}

//===--- expert choice: the phases of the same ops ----------------------===//
// indices E x C; `table` a T x E scratch. A bad index fails the stream
// (the CPU fails it with INVALID_ARGUMENT in the op's last task); the
// exchanges still run, so the other ranks are not left waiting.

/// Fails the stream (through its error word) for a bad index.
template <class X>
moe_rt_status ecCheck(X &ex, const RouteShape &r, const int64_t *indices) {
  int32_t code = ex.errorCode("expert-choice routing: an index is neither -1 "
                              "nor a token id of this rank");
  return ex.forEach(r.E * r.C,
                    routing::EcCheck{r.T, indices, ex.errorWord(), code});
}

/// Checks the indices and builds the token -> slot table.
template <class X>
moe_rt_status ecSlots(X &ex, const RouteShape &r, const int64_t *indices,
                      int64_t *table) {
  ecCheck(ex, r, indices);
  ex.forEach(r.T * r.E, routing::FillI64{table, -1});
  return ex.forEach(r.E * r.C,
                    routing::EcSlotTable{r.T, r.E, r.C, indices, table});
}

/// moe_rt_dispatch, before: send[s] = x[indices[s]].
template <class X>
moe_rt_status ecDispatchSend(X &ex, const RouteShape &r, const float *x,
                             const int64_t *indices, float *send) {
  ecCheck(ex, r, indices);
  ex.zero(send, sizeof(float) * r.E * r.C * r.M);
  return ex.forEach(r.E * r.C * r.M,
                    routing::EcDispatchRows{r.T, r.M, indices, x, send});
}

/// moe_rt_dispatch_grad, after: dx (overwritten) = the sum of each token's
/// returned rows.
template <class X>
moe_rt_status ecDispatchGradRecv(X &ex, const RouteShape &r,
                                 const int64_t *indices, int64_t *table,
                                 const float *recv, float *dx) {
  if (ecSlots(ex, r, indices, table))
    return ex.status();
  return ex.forEach(r.T * r.M, routing::EcGatherRows{r.E, r.C, r.M, table,
                                                     nullptr, recv, false,
                                                     dx});
}

/// moe_rt_combine, after: out (overwritten; 0 for tokens no expert took).
template <class X>
moe_rt_status ecCombineRecv(X &ex, const RouteShape &r, const int64_t *indices,
                            int64_t *table, const float *weights,
                            const float *recv, float *out) {
  if (ecSlots(ex, r, indices, table))
    return ex.status();
  return ex.forEach(r.T * r.M, routing::EcGatherRows{r.E, r.C, r.M, table,
                                                     weights, recv, false,
                                                     out});
}

/// moe_rt_combine_grad, between its exchanges: dweights (E x C,
/// overwritten) and drecv.
template <class X>
moe_rt_status ecCombineGradMid(X &ex, const RouteShape &r,
                               const int64_t *indices, const float *weights,
                               const float *recv, const float *dout,
                               float *drecv, float *dweights) {
  ecCheck(ex, r, indices);
  ex.zero(dweights, sizeof(float) * r.E * r.C);
  ex.zero(drecv, sizeof(float) * r.E * r.C * r.M);
  ex.forEach(r.E * r.C * r.M, routing::EcCombineBackRecv{
                                  r.T, r.M, indices, weights, dout, drecv});
  return ex.forEach(r.E * r.C, routing::EcCombineBackWeights{
                                   r.T, r.M, indices, recv, dout, dweights});
}

} // namespace moe_rt::device

#endif // MOE_RT_SRC_DEVICE_ROUTINGOPS_H
