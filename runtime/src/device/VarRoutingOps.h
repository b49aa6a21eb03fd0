//===- VarRoutingOps.h - dropless dispatch / combine, any executor -*- C++
//-*-===//
//
// moe_rt_dispatch_v / moe_rt_combine_v, their vjps and moe_rt_expert_v(_grad)
// for the CUDA backend, as src/cpu/CpuVarRoutingOps.cpp does them, written
// over an executor (Device.h) and a *link* so that CI runs them on the host
// for G simulated ranks (tests/DeviceVarRoutingTest.cpp). Layouts as
// kernels/VarRouting.h: the token side packed expert-major (expert e's
// rows from the sum of the counts of e' < e, GShard order inside), the
// expert side E_l x R x M with local expert l's rows from row 0, source
// ranks in order, zero past them.
//
// Only routed rows travel, so the sizes of the exchanges are data: the
// counts are computed on the device, all-gathered (raw 8-byte words), then
// brought to the host, which plans the exchanges with src/VarRoutePlan.h
// (the CPU backend's bookkeeping, word for word: the same rows move, an
// over-bound load fails every rank with the same message before any row
// moves). That host read waits for the stream: a variable-count op
// synchronizes its stream once (dispatch: the gathered counts; combine and
// the experts: the `rows` table), as any dropless MoE on a GPU must before
// it sizes a grouped send/recv or a GEMM by a count.
//
// Link concept (`L`; src/cuda/CudaVarRoutingOps.cu: NCCL over the group;
// the tests: an in-memory group of threads):
//   moe_rt_status L::allGather(const int64_t *mine, int64_t *all, int64_t n);
//       every rank's n int64s (device memory), in rank order, on the stream.
//   moe_rt_status L::toHost(void *dst, const void *src, size_t bytes);
//       waits for the stream, then copies device -> host.
//   moe_rt_status L::toDevice(void *dst, const void *src, size_t bytes);
//       host -> device, ordered on the stream (src may be freed on return).
//   moe_rt_status L::allToAllV(const float *send, int64_t sendCapacity,
//                              const int64_t *sendRows, float *recv,
//                              int64_t recvCapacity, const int64_t *recvRows,
//                              int64_t m);
//       rows of m floats: sendRows[p] to rank p (packed in rank order),
//       recvRows[p] from p; host row counts, device buffers.
// A link call that fails has recorded its message (moe_rt::fail).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_DEVICE_VARROUTINGOPS_H
#define MOE_RT_SRC_DEVICE_VARROUTINGOPS_H

#include "Device.h"
#include "ExpertOps.h"
#include "RoutingOps.h"

#include "../Error.h"
#include "../OpShapes.h"
#include "../VarRoutePlan.h"
#include "../kernels/TokenChunks.h"

#include "moe_rt/moe_rt.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe_rt::device {

namespace varrouting {

/// counts[e] = how many of the n (token, choice) pairs pick expert e.
struct CountPerExpert {
  int64_t n;
  const int64_t *indices;
  int64_t *counts;
  MOE_HD void operator()(int64_t e) const {
    int64_t c = 0;
    for (int64_t i = 0; i < n; ++i)
      c += indices[i] == e;
    counts[e] = c;
  }
};

/// offsets[e] = sum of counts[e' < e] (one body: E is small).
struct ExclusiveOffsets {
  int64_t E;
  const int64_t *counts;
  int64_t *offsets;
  MOE_HD void operator()(int64_t) const {
    int64_t running = 0;
    for (int64_t e = 0; e < E; ++e) {
      offsets[e] = running;
      running += counts[e];
    }
  }
};

/// pos[i] (a GShard slot) += its expert's offset; a pair with a bad index
/// (slot -1: routeTokens failed the stream) keeps -1 and moves nothing.
struct AddOffsets {
  int64_t E;
  const int64_t *indices, *offsets;
  int64_t *pos;
  MOE_HD void operator()(int64_t i) const {
    int64_t e = indices[i];
    if (pos[i] >= 0 && e >= 0 && e < E)
      pos[i] += offsets[e];
  }
};

/// Token chunk r.part of r.parts (kernels::chunkCut, one body: E is
/// small): counts cut in place, the tables KeepRows reads filled.
struct ChunkCut {
  int64_t E, part, parts;
  int64_t *counts, *offset, *first, *kept;
  MOE_HD void operator()(int64_t) const {
    kernels::chunkCut(E, part, parts, counts, offset, first, kept);
  }
};

/// pos[i] -> its row in the chunk, or -1 (kernels::keptRow); a pair with a
/// bad index has no row already.
struct KeepRows {
  int64_t E;
  const int64_t *indices, *counts, *offset, *first, *kept;
  int64_t *pos;
  MOE_HD void operator()(int64_t i) const {
    int64_t e = indices[i];
    pos[i] = e >= 0 && e < E
                 ? kernels::keptRow(pos[i], e, counts, offset, first, kept)
                 : -1;
  }
};

/// out[i] = the physical expert of routing choice indices[i] under an
/// expert placement (kernels::physicalExpert).
struct PhysicalIds {
  int64_t E;
  const int64_t *indices, *phys;
  int64_t *out;
  MOE_HD void operator()(int64_t i) const {
    out[i] = kernels::physicalExpert(indices[i], E, phys);
  }
};

/// send[pos[t, j]] = x[t] (kernels::gatherRows).
struct GatherRows {
  int64_t k, M;
  const int64_t *pos;
  const float *x;
  float *send;
  MOE_HD void operator()(int64_t i) const {
    int64_t tj = i / M, col = i % M, p = pos[tj];
    if (p >= 0)
      send[p * M + col] = x[(tj / k) * M + col];
  }
};

/// out[t] = sum over j of (w[t, j]) src[pos[t, j]], in order: combine's
/// kernels::combineRows, or with w null dispatch's adjoint
/// kernels::scatterAddRows (on a zeroed dx).
struct SumRows {
  int64_t k, M;
  const int64_t *pos;
  const float *weights, *src; // weights may be null
  float *out;
  MOE_HD void operator()(int64_t i) const {
    int64_t t = i / M, col = i % M;
    float acc = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t p = pos[t * k + j];
      if (p < 0)
        continue;
      if (weights)
        acc += weights[t * k + j] * src[p * M + col];
      else
        acc += src[p * M + col];
    }
    out[i] = acc;
  }
};

/// drecv[pos[t, j]] = w[t, j] dy[t] (kernels::combineRowsBackward).
struct CombineBackRows {
  int64_t k, M;
  const int64_t *pos;
  const float *weights, *dy;
  float *drecv;
  MOE_HD void operator()(int64_t i) const {
    int64_t tj = i / M, col = i % M, p = pos[tj];
    if (p >= 0)
      drecv[p * M + col] = weights[tj] * dy[(tj / k) * M + col];
  }
};

/// dweights[t, j] = <dy[t], recv[pos[t, j]]>, float products summed in
/// double as kernels::combineWeightsBackward.
struct CombineBackWeights {
  int64_t k, M;
  const int64_t *pos;
  const float *recv, *dy;
  float *dweights;
  MOE_HD void operator()(int64_t tj) const {
    int64_t p = pos[tj];
    double d = 0;
    if (p >= 0)
      for (int64_t col = 0; col < M; ++col) {
        float prod = dy[(tj / k) * M + col] * recv[p * M + col];
        d += prod;
      }
    dweights[tj] = float(d);
  }
};

/// out[i] = pos[i] + shift[g], g the rank holding pair i's expert
/// (kernels::shiftRows); a pair without a row (pos -1, a bad index) keeps
/// -1.
struct ShiftRows {
  int64_t E, El;
  const int64_t *indices, *pos, *shift;
  int64_t *out;
  MOE_HD void operator()(int64_t i) const {
    int64_t e = indices[i];
    out[i] = pos[i] >= 0 && e >= 0 && e < E ? pos[i] + shift[e / El] : -1;
  }
};

/// Where rank g's rows of local expert l start: recvAt[l G + g] in the
/// rank-major received buffer (from rank g: its rows for expert 0, 1, ...;
/// shift[g] rows further when given: a two-way exchange's buffer,
/// varplan::TwoWayRows), expertAt[l G + g] inside expert l's R rows (one
/// body).
struct BlockStarts {
  int64_t G, El;
  const int64_t *rows, *shift; // shift may be null
  int64_t *recvAt, *expertAt;
  MOE_HD void operator()(int64_t) const {
    int64_t at = 0;
    for (int64_t g = 0; g < G; ++g)
      for (int64_t l = 0; l < El; ++l) {
        recvAt[l * G + g] = at + (shift ? shift[g] : 0);
        at += rows[l * G + g];
      }
    for (int64_t l = 0; l < El; ++l) {
      int64_t filled = 0;
      for (int64_t g = 0; g < G; ++g) {
        expertAt[l * G + g] = filled;
        filled += rows[l * G + g];
      }
    }
  }
};

/// kernels::recvToExpertMajor, one body per element i of E_l x R x M:
/// expert[i] from the received buffer (rows past the filled ones zero), or,
/// toRecv, the other way (expert side -> a send buffer).
struct ExpertMajorRows {
  int64_t G, R, M;
  const int64_t *rows, *recvAt, *expertAt;
  const float *from;
  float *to;
  bool toRecv;
  MOE_HD void operator()(int64_t i) const {
    int64_t col = i % M, q = i / M, row = q % R, l = q / R;
    for (int64_t g = 0; g < G; ++g) {
      int64_t first = expertAt[l * G + g], n = rows[l * G + g];
      if (row >= first && row < first + n) {
        int64_t at = (recvAt[l * G + g] + row - first) * M + col;
        if (toRecv)
          to[at] = from[i];
        else
          to[i] = from[at];
        return;
      }
    }
    if (!toRecv)
      to[i] = 0;
  }
};

} // namespace varrouting

//===--- the phases on one rank's device ---------------------------------===//

/// counts (E) and each (token, choice)'s packed row pos (T x k):
/// kernels::packedRows. A bad expert index fails the stream.
template <class X>
moe_rt_status packedRows(X &ex, const VarRouteShape &r, const int64_t *indices,
                         int64_t *counts, int64_t *pos) {
  int64_t n = r.T * r.k;
  int64_t *offsets = ex.scratchI64(r.E);
  if (ex.status())
    return ex.status();
  // No capacity: every pair gets its GShard slot inside its expert.
  if (routeTokens(ex, r.T, r.E, r.k, n + 1, indices, pos))
    return ex.status();
  ex.forEach(r.E, varrouting::CountPerExpert{n, indices, counts});
  ex.forEach(1, varrouting::ExclusiveOffsets{r.E, counts, offsets});
  ex.forEach(n, varrouting::AddOffsets{r.E, indices, offsets, pos});
  if (r.parts <= 1)
    return ex.status();
  // A token chunk: only its run of each expert's rows travels, packed
  // expert-major again (the counts every rank gathers are the chunk's).
  int64_t *first = ex.scratchI64(r.E), *kept = ex.scratchI64(r.E);
  if (ex.status())
    return ex.status();
  ex.forEach(1, varrouting::ChunkCut{r.E, r.part, r.parts, counts, offsets,
                                     first, kept});
  return ex.forEach(n, varrouting::KeepRows{r.E, indices, counts, offsets,
                                            first, kept, pos});
}

/// Under an expert placement (r.slots, device, G x E_l), `indices` becomes
/// the routing choices as physical experts (g E_l + s; device scratch), so
/// that the layouts need not know the map, as the CPU op does. The table is
/// read to the host (a stream wait) and checked there with the CPU op's
/// words; it is the same step input on every rank, so a bad one fails
/// every rank alike, before any exchange.
template <class X, class L>
moe_rt_status physicalIndices(X &ex, L &link, const char *call,
                              const VarRouteShape &r,
                              const int64_t *&indices) {
  if (!r.slots)
    return MOE_RT_OK;
  std::vector<int64_t> table(r.G * r.El), phys;
  if (moe_rt_status st = link.toHost(table.data(), r.slots,
                                     sizeof(int64_t) * table.size()))
    return st;
  VarRouteShape onHost = r;
  onHost.slots = table.data();
  if (std::string why = varplan::physicalExperts(onHost, phys); !why.empty())
    return fail(MOE_RT_INVALID_ARGUMENT, std::string(call) + ": " + why);
  int64_t *physDevice = ex.scratchI64(r.E),
          *mapped = ex.scratchI64(r.T * r.k);
  if (ex.status())
    return ex.status();
  if (moe_rt_status st =
          link.toDevice(physDevice, phys.data(), sizeof(int64_t) * r.E))
    return st;
  ex.forEach(r.T * r.k,
             varrouting::PhysicalIds{r.E, indices, physDevice, mapped});
  indices = mapped;
  return ex.status();
}

/// The expert side (E_l x R x M) `to` from the received rows `from`, or,
/// toRecv, the expert side `from` into the send buffer `to`; `shift`
/// (device, G, may be null) as BlockStarts'.
template <class X>
moe_rt_status expertMajor(X &ex, const VarRouteShape &r, const int64_t *rows,
                          const float *from, float *to, bool toRecv,
                          const int64_t *shift = nullptr) {
  int64_t *recvAt = ex.scratchI64(r.El * r.G),
          *expertAt = ex.scratchI64(r.El * r.G);
  if (ex.status())
    return ex.status();
  ex.forEach(1, varrouting::BlockStarts{r.G, r.El, rows, shift, recvAt,
                                                  expertAt});
  return ex.forEach(r.El * r.R * r.M,
                    varrouting::ExpertMajorRows{r.G, r.R, r.M, rows, recvAt,
                                                expertAt, from, to, toRecv});
}

//===--- the ops ----------------------------------------------------------===//

namespace varrouting {

/// An error that waits for the op's exchanges: a bad index fails the
/// stream (seen when the host reads), but the exchanges still run so that
/// no other rank is left waiting; the op then reports it.
struct Deferred {
  moe_rt_status status = MOE_RT_OK;
  std::string message;
  void keep(moe_rt_status s) {
    if (s && !status) {
      status = s;
      message = moe_rt_last_error();
    }
  }
  moe_rt_status report(moe_rt_status s) const {
    return status ? fail(status, message) : s;
  }
};

/// What the token side of every op computes first: its packed rows, its
/// counts on the host (`mine`), and, for dispatch and its vjp, every rank's
/// counts on the host (`all`).
template <class X, class L>
moe_rt_status countRoutes(X &ex, L &link, const VarRouteShape &r,
                          const int64_t *indices, int64_t *pos, bool gather,
                          std::vector<int64_t> &all, Deferred &later) {
  int64_t *counts = ex.scratchI64(r.E),
          *gathered = gather ? ex.scratchI64(r.G * r.E) : nullptr;
  if (ex.status())
    return ex.status();
  later.keep(packedRows(ex, r, indices, counts, pos));
  if (gather) {
    if (moe_rt_status st = link.allGather(counts, gathered, r.E))
      return st;
    all.assign(r.G * r.E, 0);
    later.keep(link.toHost(all.data(), gathered, sizeof(int64_t) * r.G * r.E));
  } else {
    all.assign(r.E, 0);
    later.keep(link.toHost(all.data(), counts, sizeof(int64_t) * r.E));
  }
  return MOE_RT_OK;
}

/// Dispatch's and its vjp's first half: the packed rows, every rank's
/// counts, the over-bound check (identical on every rank: they decide from
/// the same counts), the rows each way, and the `rows` table written to
/// `rowsDevice` (zeroed when over the bound, so that nothing reads a load).
template <class X, class L>
moe_rt_status routeAndPlan(X &ex, L &link, const char *call,
                           const VarRouteShape &r, const int64_t *indices,
                           int64_t *pos, int64_t *rowsDevice,
                           varplan::RankRows &n, Deferred &later) {
  std::vector<int64_t> all;
  if (moe_rt_status st =
          countRoutes(ex, link, r, indices, pos, true, all, later))
    return st;
  std::vector<int64_t> rows(r.El * r.G, 0);
  varplan::rowsFromCounts(r, all.data(), rows.data());
  std::string why = varplan::overBound(r, all.data());
  if (why.empty())
    why = varplan::rowsPerRank(r, all.data() + r.rank * r.E, rows.data(), n);
  if (!why.empty()) {
    ex.zero(rowsDevice, sizeof(int64_t) * rows.size());
    return fail(MOE_RT_INVALID_ARGUMENT, std::string(call) + ": " + why);
  }
  return link.toDevice(rowsDevice, rows.data(), sizeof(int64_t) * rows.size());
}

/// Combine's plan: this rank's counts and the expert side's `rows`
/// (device), both brought to the host.
template <class L>
moe_rt_status planFromRows(const char *call, L &link, const VarRouteShape &r,
                           const std::vector<int64_t> &mine,
                           const int64_t *rowsDevice, varplan::RankRows &n,
                           Deferred &later) {
  std::vector<int64_t> rows(r.El * r.G);
  later.keep(
      link.toHost(rows.data(), rowsDevice, sizeof(int64_t) * r.El * r.G));
  std::string why = varplan::rowsPerRank(r, mine.data(), rows.data(), n);
  if (!why.empty())
    return fail(MOE_RT_INVALID_ARGUMENT, std::string(call) + ": " + why);
  return MOE_RT_OK;
}

} // namespace varrouting

/// moe_rt_dispatch_v: out (E_l x R x M) and rowsOut (E_l x G, device)
/// overwritten. Over the bound: rowsOut zeroed, nothing moves, every rank
/// fails with the same message.
template <class X, class L>
moe_rt_status dispatchV(X &ex, L &link, const VarRouteShape &r, const float *x,
                        const int64_t *indices, float *out, int64_t *rowsOut) {
  int64_t *pos = ex.scratchI64(r.T * r.k);
  float *send = ex.scratchF32(r.T * r.k * r.M),
        *recv = ex.scratchF32(r.El * r.R * r.M);
  if (ex.status())
    return ex.status();
  if (moe_rt_status st =
          physicalIndices(ex, link, "moe_rt_dispatch_v", r, indices))
    return st;
  varrouting::Deferred later;
  varplan::RankRows n;
  if (moe_rt_status st = varrouting::routeAndPlan(
          ex, link, "moe_rt_dispatch_v", r, indices, pos, rowsOut, n, later))
    return st;
  ex.forEach(r.T * r.k * r.M, varrouting::GatherRows{r.k, r.M, pos, x, send});
  if (moe_rt_status st = link.allToAllV(send, r.T * r.k, n.toRank.data(), recv,
                                        r.El * r.R, n.fromRank.data(), r.M))
    return st;
  return later.report(expertMajor(ex, r, rowsOut, recv, out, false));
}

/// moe_rt_dispatch_v_grad: dx (T x M) overwritten. The vjp's primals do not
/// hold the forward's rows: it counts again, as the CPU op does.
template <class X, class L>
moe_rt_status dispatchVGrad(X &ex, L &link, const VarRouteShape &r,
                            const int64_t *indices, const float *dout,
                            float *dx) {
  int64_t *pos = ex.scratchI64(r.T * r.k),
          *rowsDevice = ex.scratchI64(r.El * r.G);
  float *send = ex.scratchF32(r.El * r.R * r.M),
        *recv = ex.scratchF32(r.T * r.k * r.M);
  if (ex.status())
    return ex.status();
  if (moe_rt_status st =
          physicalIndices(ex, link, "moe_rt_dispatch_v_grad", r, indices))
    return st;
  varrouting::Deferred later;
  varplan::RankRows n;
  if (moe_rt_status st =
          varrouting::routeAndPlan(ex, link, "moe_rt_dispatch_v_grad", r,
                                   indices, pos, rowsDevice, n, later))
    return st;
  expertMajor(ex, r, rowsDevice, dout, send, true);
  if (moe_rt_status st = link.allToAllV(send, r.El * r.R, n.fromRank.data(),
                                        recv, r.T * r.k, n.toRank.data(), r.M))
    return st;
  return later.report(ex.forEach(
      r.T * r.M, varrouting::SumRows{r.k, r.M, pos, nullptr, recv, dx}));
}

namespace varrouting {

/// Combine's first half, forward and vjp alike: the token side's packed
/// rows, the plan, and the expert side's filled rows brought to the
/// tokens' ranks (into `tokens`, T k x M).
template <class X, class L>
moe_rt_status bringToTokens(X &ex, L &link, const char *call,
                            const VarRouteShape &r, const int64_t *rows,
                            const float *expertOut, const int64_t *indices,
                            int64_t *pos, float *tokens, varplan::RankRows &n,
                            Deferred &later) {
  float *send = ex.scratchF32(r.El * r.R * r.M);
  if (ex.status())
    return ex.status();
  std::vector<int64_t> mine;
  if (moe_rt_status st =
          countRoutes(ex, link, r, indices, pos, false, mine, later))
    return st;
  if (moe_rt_status st = planFromRows(call, link, r, mine, rows, n, later))
    return st;
  expertMajor(ex, r, rows, expertOut, send, true);
  return link.allToAllV(send, r.El * r.R, n.fromRank.data(), tokens, r.T * r.k,
                        n.toRank.data(), r.M);
}

} // namespace varrouting

/// moe_rt_combine_v: out (T x M) overwritten.
template <class X, class L>
moe_rt_status combineV(X &ex, L &link, const VarRouteShape &r,
                       const int64_t *rows, const float *expertOut,
                       const int64_t *indices, const float *weights,
                       float *out) {
  int64_t *pos = ex.scratchI64(r.T * r.k);
  float *tokens = ex.scratchF32(r.T * r.k * r.M);
  if (ex.status())
    return ex.status();
  if (moe_rt_status st =
          physicalIndices(ex, link, "moe_rt_combine_v", r, indices))
    return st;
  varrouting::Deferred later;
  varplan::RankRows n;
  if (moe_rt_status st =
          varrouting::bringToTokens(ex, link, "moe_rt_combine_v", r, rows,
                                    expertOut, indices, pos, tokens, n, later))
    return st;
  return later.report(ex.forEach(
      r.T * r.M, varrouting::SumRows{r.k, r.M, pos, weights, tokens, out}));
}

/// moe_rt_combine_v_grad: dexpertOut (E_l x R x M) and dweights (T x k)
/// overwritten. One exchange both ways (varplan::TwoWayRows, as the CPU
/// op): the gradient rows go to the experts while the expert outputs come
/// to the tokens again (no state kept from the forward).
template <class X, class L>
moe_rt_status combineVGrad(X &ex, L &link, const VarRouteShape &r,
                           const int64_t *rows, const float *expertOut,
                           const int64_t *indices, const float *weights,
                           const float *dout, float *dexpertOut,
                           float *dweights) {
  int64_t pairs = r.T * r.k, both = pairs + r.El * r.R;
  int64_t *pos = ex.scratchI64(pairs), *sendPos = ex.scratchI64(pairs),
          *recvPos = ex.scratchI64(pairs), *shifts = ex.scratchI64(4 * r.G);
  float *send = ex.scratchF32(both * r.M), *recv = ex.scratchF32(both * r.M);
  if (ex.status())
    return ex.status();
  if (moe_rt_status st =
          physicalIndices(ex, link, "moe_rt_combine_v_grad", r, indices))
    return st;
  varrouting::Deferred later;
  varplan::RankRows n;
  std::vector<int64_t> mine;
  if (moe_rt_status st = varrouting::countRoutes(ex, link, r, indices, pos,
                                                 false, mine, later))
    return st;
  if (moe_rt_status st = varrouting::planFromRows(
          "moe_rt_combine_v_grad", link, r, mine, rows, n, later))
    return st;
  varplan::TwoWayRows two = varplan::twoWayRows(n);
  std::vector<int64_t> shift;
  for (const std::vector<int64_t> *v : {&two.gradSent, &two.outputReceived,
                                        &two.outputSent, &two.gradReceived})
    shift.insert(shift.end(), v->begin(), v->end());
  if (moe_rt_status st = link.toDevice(shifts, shift.data(),
                                       sizeof(int64_t) * shift.size()))
    return st;
  const int64_t *gradSent = shifts, *outputReceived = shifts + r.G,
                *outputSent = shifts + 2 * r.G, *gradReceived = shifts + 3 * r.G;
  ex.forEach(pairs, varrouting::ShiftRows{r.E, r.El, indices, pos, gradSent,
                                          sendPos});
  ex.forEach(pairs, varrouting::ShiftRows{r.E, r.El, indices, pos,
                                          outputReceived, recvPos});
  ex.forEach(pairs * r.M, varrouting::CombineBackRows{r.k, r.M, sendPos,
                                                      weights, dout, send});
  expertMajor(ex, r, rows, expertOut, send, true, outputSent);
  if (moe_rt_status st = link.allToAllV(send, both, two.perPeer.data(), recv,
                                        both, two.perPeer.data(), r.M))
    return st;
  ex.forEach(pairs, varrouting::CombineBackWeights{r.k, r.M, recvPos, recv,
                                                   dout, dweights});
  return later.report(
      expertMajor(ex, r, rows, recv, dexpertOut, false, gradReceived));
}

//===--- experts over their filled rows ----------------------------------===//

namespace varrouting {

/// The `rows` table (E_l x G, device) on the host, checked against the
/// expert buffer's `slots` rows per expert.
template <class L>
moe_rt_status filledRowsOf(L &link, const char *call, const ExpertShape &f,
                           int64_t G, const int64_t *rowsDevice,
                           std::vector<int64_t> &filled) {
  std::vector<int64_t> rows(f.experts * G);
  if (moe_rt_status st =
          link.toHost(rows.data(), rowsDevice, sizeof(int64_t) * rows.size()))
    return st;
  if (std::string why =
          varplan::expertRowsFit(G, f.experts, f.slots, rows.data());
      !why.empty())
    return fail(MOE_RT_INVALID_ARGUMENT, std::string(call) + ": " + why);
  filled.assign(f.experts, 0);
  for (int64_t l = 0; l < f.experts; ++l)
    filled[l] = varplan::filledRows(G, l, rows.data());
  return MOE_RT_OK;
}

/// Expert l's n filled rows as a one-expert shape.
inline ExpertShape filledShape(const ExpertShape &f, int64_t n) {
  ExpertShape one = f;
  one.experts = 1;
  one.slots = n;
  return one;
}

} // namespace varrouting

/// moe_rt_expert_v: out (E_l x R x M) overwritten; each expert's GEMMs run
/// over its filled rows only (one GEMM per expert, m = its count), rows
/// past them are zero.
template <class X, class L>
moe_rt_status expertV(X &ex, L &link, moe_rt_activation act,
                      const ExpertShape &f, int64_t G, const int64_t *rows,
                      const float *x, const float *up, const float *gate,
                      const float *down, float *out) {
  std::vector<int64_t> filled;
  if (moe_rt_status st =
          varrouting::filledRowsOf(link, "moe_rt_expert_v", f, G, rows, filled))
    return st;
  int64_t R = f.slots, m = f.m, h = f.h;
  ex.zero(out, sizeof(float) * f.experts * R * m);
  for (int64_t l = 0; l < f.experts; ++l)
    if (filled[l] > 0)
      expertForward(ex, act, varrouting::filledShape(f, filled[l]),
                    x + l * R * m, up + l * m * h,
                    gate ? gate + l * m * h : nullptr, down + l * h * m,
                    out + l * R * m);
  return ex.status();
}

/// moe_rt_expert_v_grad: dx, dup, dgate (when gated), ddown overwritten.
template <class X, class L>
moe_rt_status expertVGrad(X &ex, L &link, moe_rt_activation act,
                          const ExpertShape &f, int64_t G, const int64_t *rows,
                          const float *x, const float *up, const float *gate,
                          const float *down, const float *dout, float *dx,
                          float *dup, float *dgate, float *ddown) {
  std::vector<int64_t> filled;
  if (moe_rt_status st = varrouting::filledRowsOf(link, "moe_rt_expert_v_grad",
                                                  f, G, rows, filled))
    return st;
  int64_t R = f.slots, m = f.m, h = f.h, E = f.experts;
  ex.zero(dx, sizeof(float) * E * R * m);
  ex.zero(dup, sizeof(float) * E * m * h);
  ex.zero(ddown, sizeof(float) * E * h * m);
  if (gate)
    ex.zero(dgate, sizeof(float) * E * m * h);
  for (int64_t l = 0; l < E; ++l) {
    if (filled[l] == 0)
      continue;
    int64_t w = l * m * h, a = l * R * m;
    expertBackward(ex, act, varrouting::filledShape(f, filled[l]), x + a,
                   up + w, gate ? gate + w : nullptr, down + w, dout + a,
                   dx + a, dup + w, gate ? dgate + w : nullptr, ddown + w);
  }
  return ex.status();
}

} // namespace moe_rt::device

#endif // MOE_RT_SRC_DEVICE_VARROUTINGOPS_H
