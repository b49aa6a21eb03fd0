//===- PlacementOps.h - NetMoE's sample moves and placing combine -*- C++ -*-===//
//
// moe_rt_move_samples and moe_rt_combine_v_place(_grad) for the CUDA
// backend, written over an executor (Device.h) and a link
// (VarRoutingOps.h's concept, plus allGatherF32 / reduceScatterF32 below)
// so that the host tests run them for simulated ranks
// (tests/DeviceVarRoutingTest.cpp, DevicePlacement.*). The routes are the CPU op's
// (src/cpu/CpuPlacementOps.cpp), built by the same host functions on the
// same gathered data: kernels::checkPlacement, kernels::placedRoutes,
// kernels::samplePicks (kernels/Placement.h) and, under an expert
// placement, varplan::toPhysical; the rows then move by device bodies that
// do kernels/Placement.h's arithmetic element by element, in its order.
//
// Host reads (stream waits): the gathered indices and the placement (the
// combines), the placement (move_samples). Every rank plans from the same
// gathered data, so a bad placement or index fails every rank alike, after
// the gathers and before any row moves, with the CPU op's words.
//
// Link additions:
//   moe_rt_status L::allGatherF32(const float *mine, float *all, int64_t n);
//   moe_rt_status L::reduceScatterF32(const float *all, float *mine,
//                                     int64_t n);  // all: G x n, summed
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_DEVICE_PLACEMENTOPS_H
#define MOE_RT_SRC_DEVICE_PLACEMENTOPS_H

#include "Device.h"

#include "../Error.h"
#include "../OpShapes.h"
#include "../VarRoutePlan.h"
#include "../kernels/Placement.h"

#include "moe_rt/moe_rt.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe_rt::device {

namespace placed {

/// send row n = w y[row] (+ h[row] for a first choice with a residual):
/// kernels::placedSendRows, one element each.
struct SendRows {
  int64_t M;
  const int64_t *row, *choice, *slot;
  const float *allW, *y, *residual; // residual may be null
  float *send;
  MOE_HD void operator()(int64_t i) const {
    int64_t n = i / M, a = i % M;
    float v = allW[choice[n]] * y[row[n] * M + a];
    if (residual && slot[n] == 0)
      v += residual[row[n] * M + a];
    send[i] = v;
  }
};

/// out[t] = sum over j, in j order, of the received row of (t, j)
/// (`at`: its index in recv, -1 none): kernels::placedGather.
struct Gather {
  int64_t k, M;
  const int64_t *at;
  const float *recv;
  float *out;
  MOE_HD void operator()(int64_t i) const {
    int64_t t = i / M, a = i % M;
    float acc = 0;
    for (int64_t j = 0; j < k; ++j)
      if (at[t * k + j] >= 0)
        acc += recv[at[t * k + j] * M + a];
    out[i] = acc;
  }
};

/// send row n = dout[token n] (kernels::placedScatterCotangents).
struct Cotangents {
  int64_t M;
  const int64_t *token;
  const float *dout;
  float *send;
  MOE_HD void operator()(int64_t i) const {
    send[i] = dout[token[i / M] * M + i % M];
  }
};

/// dy[row] = w d, dh[row] = d for a first choice (kernels::placedBackward's
/// rows, one element each).
struct BackRows {
  int64_t M;
  const int64_t *row, *choice, *slot;
  const float *allW, *recv;
  float *dy, *dresidual; // dresidual may be null
  MOE_HD void operator()(int64_t i) const {
    int64_t n = i / M, a = i % M, at = row[n] * M + a;
    dy[at] = allW[choice[n]] * recv[i];
    if (dresidual && slot[n] == 0)
      dresidual[at] = recv[i];
  }
};

/// The choice's weight gradient <d, y[row]>, float products summed in
/// double (kernels::placedBackward's dot), into the group-wide buffer.
struct BackWeights {
  int64_t M;
  const int64_t *row, *choice;
  const float *y, *recv;
  float *allDw;
  MOE_HD void operator()(int64_t n) const {
    double dot = 0;
    for (int64_t a = 0; a < M; ++a) {
      float prod = recv[n * M + a] * y[row[n] * M + a];
      dot += prod;
    }
    allDw[choice[n]] = float(dot);
  }
};

/// out row n = all[pick[n]] (moe_rt_move_samples' local pick).
struct PickRows {
  int64_t row;
  const int64_t *pick, *all;
  int64_t *out;
  MOE_HD void operator()(int64_t i) const {
    out[i] = all[pick[i / row] * row + i % row];
  }
};

/// A placing combine's routes on the device.
struct DeviceRoutes {
  const int64_t *sendRow = nullptr, *sendChoice = nullptr, *sendSlot = nullptr,
                *recvToken = nullptr, *at = nullptr;
  int64_t sent = 0, received = 0;
};

/// What both placing combines do first: gather the group's indices and
/// weights (allW, device, G T k), read the indices and the placement to
/// the host, plan there with the CPU op's functions, and copy the routes
/// to the device. "call: why" when the plan fails (every rank alike).
template <class X, class L>
moe_rt_status planOnHost(X &ex, L &link, const char *call,
                         const VarRouteShape &r, int64_t B,
                         const int64_t *indices, const float *weights,
                         const int64_t *place, float *allW,
                         kernels::PlacedRoutes &routes, DeviceRoutes &dr) {
  int64_t n = r.T * r.k;
  int64_t *allIdx = ex.scratchI64(r.G * n);
  if (ex.status())
    return ex.status();
  if (moe_rt_status st = link.allGather(indices, allIdx, n))
    return st;
  if (moe_rt_status st = link.allGatherF32(weights, allW, n))
    return st;
  std::vector<int64_t> hostIdx(r.G * n), hostPlace(r.G * B);
  if (moe_rt_status st = link.toHost(hostIdx.data(), allIdx,
                                     sizeof(int64_t) * hostIdx.size()))
    return st;
  if (moe_rt_status st = link.toHost(hostPlace.data(), place,
                                     sizeof(int64_t) * hostPlace.size()))
    return st;
  std::string why;
  if (r.slots) {
    // The table is device memory: read it too, then map as the CPU op.
    std::vector<int64_t> table(r.G * r.El);
    if (moe_rt_status st = link.toHost(table.data(), r.slots,
                                       sizeof(int64_t) * table.size()))
      return st;
    VarRouteShape onHost = r;
    onHost.slots = table.data();
    why = varplan::toPhysical(onHost, hostIdx.data(), int64_t(hostIdx.size()),
                              hostIdx);
  }
  kernels::PlacedGroup g{r.G, r.rank, r.E, r.El, r.T, r.k, B, r.R,
                         hostIdx.data(), hostPlace.data()};
  if (why.empty())
    why = kernels::checkPlacement(g);
  if (why.empty())
    why = kernels::placedRoutes(g, routes);
  if (!why.empty())
    return fail(MOE_RT_INVALID_ARGUMENT, std::string(call) + ": " + why);
  // Where each local (token, choice)'s row arrives (kernels::placedGather).
  std::vector<int64_t> at(n, -1);
  for (size_t i = 0; i < routes.recvToken.size(); ++i)
    at[routes.recvToken[i] * r.k + routes.recvSlot[i]] = int64_t(i);
  dr.sent = int64_t(routes.sendRow.size());
  dr.received = int64_t(routes.recvToken.size());
  int64_t *words = ex.scratchI64(3 * dr.sent + dr.received + n + 1);
  if (ex.status())
    return ex.status();
  dr.sendRow = words;
  dr.sendChoice = words + dr.sent;
  dr.sendSlot = words + 2 * dr.sent;
  dr.recvToken = words + 3 * dr.sent;
  dr.at = words + 3 * dr.sent + dr.received;
  std::vector<int64_t> all;
  for (const std::vector<int64_t> *v :
       {&routes.sendRow, &routes.sendChoice, &routes.sendSlot,
        &routes.recvToken, &at})
    all.insert(all.end(), v->begin(), v->end());
  return link.toDevice(words, all.data(), sizeof(int64_t) * all.size());
}

} // namespace placed

/// moe_rt_combine_v_place: out (T x M, this rank's new samples)
/// overwritten; expert rows go straight to their samples' new ranks.
template <class X, class L>
moe_rt_status combineVPlaced(X &ex, L &link, const VarRouteShape &r,
                             int64_t B, const float *expertOut,
                             const int64_t *indices, const float *weights,
                             const float *residual, const int64_t *place,
                             float *out) {
  float *allW = ex.scratchF32(r.G * r.T * r.k),
        *send = ex.scratchF32(r.El * r.R * r.M),
        *recv = ex.scratchF32(r.T * r.k * r.M);
  if (ex.status())
    return ex.status();
  kernels::PlacedRoutes routes;
  placed::DeviceRoutes dr;
  if (moe_rt_status st =
          placed::planOnHost(ex, link, "moe_rt_combine_v_place", r, B, indices,
                             weights, place, allW, routes, dr))
    return st;
  ex.forEach(dr.sent * r.M,
             placed::SendRows{r.M, dr.sendRow, dr.sendChoice, dr.sendSlot,
                              allW, expertOut, residual, send});
  if (moe_rt_status st =
          link.allToAllV(send, r.El * r.R, routes.sendCount.data(), recv,
                         r.T * r.k, routes.recvCount.data(), r.M))
    return st;
  return ex.forEach(r.T * r.M, placed::Gather{r.k, r.M, dr.at, recv, out});
}

/// moe_rt_combine_v_place_grad: dexpertOut, dweights and (when given)
/// dresidual overwritten; the forward's routes reversed, the weights'
/// gradients summed back to their tokens' ranks by a reduce-scatter.
template <class X, class L>
moe_rt_status combineVPlacedGrad(X &ex, L &link, const VarRouteShape &r,
                                 int64_t B, const float *expertOut,
                                 const int64_t *indices, const float *weights,
                                 const int64_t *place, const float *dout,
                                 float *dexpertOut, float *dweights,
                                 float *dresidual) {
  float *allW = ex.scratchF32(r.G * r.T * r.k),
        *allDw = ex.scratchF32(r.G * r.T * r.k),
        *send = ex.scratchF32(r.T * r.k * r.M),
        *recv = ex.scratchF32(r.El * r.R * r.M);
  if (ex.status())
    return ex.status();
  kernels::PlacedRoutes routes;
  placed::DeviceRoutes dr;
  if (moe_rt_status st =
          placed::planOnHost(ex, link, "moe_rt_combine_v_place_grad", r, B,
                             indices, weights, place, allW, routes, dr))
    return st;
  ex.forEach(dr.received * r.M,
             placed::Cotangents{r.M, dr.recvToken, dout, send});
  if (moe_rt_status st =
          link.allToAllV(send, r.T * r.k, routes.recvCount.data(), recv,
                         r.El * r.R, routes.sendCount.data(), r.M))
    return st;
  ex.zero(dexpertOut, sizeof(float) * r.El * r.R * r.M);
  if (dresidual)
    ex.zero(dresidual, sizeof(float) * r.El * r.R * r.M);
  ex.forEach(dr.sent * r.M,
             placed::BackRows{r.M, dr.sendRow, dr.sendChoice, dr.sendSlot,
                              allW, recv, dexpertOut, dresidual});
  ex.forEach(dr.sent, placed::BackWeights{r.M, dr.sendRow, dr.sendChoice,
                                          expertOut, recv, allDw});
  if (ex.status())
    return ex.status();
  // Each weight's gradient was computed on its expert's rank (the others
  // hold 0): the sum over the group returns it to its token's rank.
  return link.reduceScatterF32(allDw, dweights, r.T * r.k);
}

/// moe_rt_move_samples: out (B x row int64s) = this rank's new samples of
/// x (every rank's B x row), in sample order.
template <class X, class L>
moe_rt_status moveSamples(X &ex, L &link, int64_t G, int64_t rank, int64_t B,
                          int64_t row, const int64_t *place, const int64_t *x,
                          int64_t *out) {
  int64_t *all = ex.scratchI64(G * B * row), *pick = ex.scratchI64(B);
  if (ex.status())
    return ex.status();
  if (moe_rt_status st = link.allGather(x, all, B * row))
    return st;
  std::vector<int64_t> hostPlace(G * B), picks;
  if (moe_rt_status st = link.toHost(hostPlace.data(), place,
                                     sizeof(int64_t) * hostPlace.size()))
    return st;
  if (std::string why =
          kernels::samplePicks(G, B, rank, hostPlace.data(), picks);
      !why.empty())
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_move_samples: " + why);
  if (moe_rt_status st =
          link.toDevice(pick, picks.data(), sizeof(int64_t) * B))
    return st;
  return ex.forEach(B * row, placed::PickRows{row, pick, all, out});
}

} // namespace moe_rt::device

#endif // MOE_RT_SRC_DEVICE_PLACEMENTOPS_H
