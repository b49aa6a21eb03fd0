//===- CpuVarRoutingOps.cpp - dropless dispatch / combine on the CPU ------===//
//
// Variable-count routing: only routed tokens travel. Dispatch exchanges
// every rank's per-expert counts first (an all-gather of E integers, so
// that every rank knows every rank's load and all of them fail together,
// with the same message, when one exceeds the bound — no rank is left
// waiting; a token chunk with `all_counts` reads them from the layer's one
// moe_rt_exchange_counts instead), then moves the rows with an all-to-all-v whose counts follow
// from those. Combine and the vjps need no counts exchange: the expert side
// knows what it received (the `rows` tensor, E_l x G) and the token side
// what it sent (its own indices); combine's vjp moves both ways in one
// all-to-all-v (varplan::TwoWayRows). Layouts: kernels/VarRouting.h; counts,
// offsets and the over-bound message: src/VarRoutePlan.h (shared with the
// CUDA backend). Sizes are read when the stream runs the tasks, as the
// data is.
//
//===----------------------------------------------------------------------===//

#include "CpuOps.h"
#include "CpuTasks.h"
#include "KeptActivations.h"

#include "../CollectivePlan.h"
#include "../VarRoutePlan.h"
#include "../mpi/MpiCollectives.h"
#include "kernels/Expert.h"
#include "kernels/VarRouting.h"

#include <memory>
#include <string>
#include <vector>

namespace moe_rt::cpu {
namespace {
namespace k = moe_rt::kernels;
using coll::PeerPlan;
using Var = VarRouteShape;

/// What the tasks of one op share: the token side's packed rows, the
/// counts, the plan of each all-to-all-v, the buffers and a deferred error
/// (reported in the op's last task, after its collectives). The op's last
/// task holds it, so the buffers outlive every collective that reads them.
struct VarState {
  std::vector<int64_t> pos, mine, all, physical;
  std::vector<float> tokens, experts; // T k x M packed; E_l R x M received
  // Combine's vjp: both ways in one exchange, its buffers and plan, and
  // each token-side row's place in them.
  std::vector<float> sendBoth, recvBoth;
  std::vector<int64_t> sendPos, recvPos;
  varplan::TwoWayRows twoWay;
  std::shared_ptr<PeerPlan> toExperts = std::make_shared<PeerPlan>(),
                            toTokens = std::make_shared<PeerPlan>(),
                            bothWays = std::make_shared<PeerPlan>();
  std::string error;

  /// The buffers of a one-way exchange (tokens, experts) or, `bothWays`,
  /// of combine's vjp (sendBoth, recvBoth): sized here, since the exchange
  /// is queued with their addresses.
  VarState(const Var &r, bool bothWays = false)
      : pos(r.T * r.k), mine(r.E), all(r.G * r.E) {
    int64_t tokenSide = r.T * r.k * r.M, expertSide = r.El * r.R * r.M;
    if (bothWays) {
      sendBoth.resize(tokenSide + expertSide);
      recvBoth.resize(tokenSide + expertSide);
    } else {
      tokens.resize(tokenSide);
      experts.resize(expertSide);
    }
  }

  /// Token-side packed rows of `idx` and this rank's per-expert counts.
  /// Under an expert placement the rows are packed by physical expert
  /// (rank, slot), so the layouts below need not know the map; a bad table
  /// routes nothing (every rank finds the same fault).
  void route(const Var &r, const int64_t *idx) {
    if (r.slots) {
      if (std::string why = varplan::toPhysical(r, idx, r.T * r.k, physical);
          !why.empty())
        return fail(r, why);
      idx = physical.data();
    }
    k::packedRows(r.T, r.E, r.k, idx, mine.data(), pos.data());
    // The layer's exchanged counts hold whole rows: read them before the
    // chunk is cut (the dispatch's counts, no collective of its own).
    if (r.allCounts)
      if (std::string why = varplan::countsFromExchange(r, r.allCounts,
                                                        mine.data(),
                                                        all.data());
          !why.empty())
        return fail(r, why);
    if (r.parts > 1)
      k::keepPart(r.T * r.k, r.E, idx, r.part, r.parts, mine.data(),
                  pos.data());
  }

  /// The plans both ways from the token side's counts (mine: rows to each
  /// rank's experts) and the expert side's rows (E_l x G, rows from each
  /// rank). An inconsistent plan (a bad `rows` tensor) becomes an error and
  /// an empty exchange.
  void plan(const Var &r, const int64_t *rows) {
    if (!error.empty())
      return; // the exchanges stay empty
    varplan::RankRows n;
    std::string why = varplan::rowsPerRank(r, mine.data(), rows, n);
    if (why.empty())
      why = varplan::planExchanges(r, n, *toExperts, *toTokens);
    if (!why.empty())
      fail(r, why);
  }

  /// Combine's vjp: the one exchange both ways (varplan::TwoWayRows) from
  /// the token side's counts and the expert side's rows, and where each
  /// token-side row goes (sendPos) and comes back (recvPos).
  void planBothWays(const Var &r, const int64_t *idx, const int64_t *rows) {
    if (r.slots)
      idx = physical.data(); // route() packed the rows by physical expert
    varplan::RankRows n;
    std::string why = varplan::rowsPerRank(r, mine.data(), rows, n);
    int64_t capacity = r.T * r.k + r.El * r.R;
    if (why.empty()) {
      twoWay = varplan::twoWayRows(n);
      why = coll::planAllToAllV(int(r.G), twoWay.perPeer.data(),
                                twoWay.perPeer.data(), r.M, capacity, r.M,
                                capacity, *bothWays);
    }
    if (!why.empty())
      return fail(r, "the routing counts do not match the rows tensor: " +
                         why);
    sendPos.resize(r.T * r.k);
    recvPos.resize(r.T * r.k);
    k::shiftRows(r.T * r.k, r.El, idx, pos.data(), twoWay.gradSent.data(),
                 sendPos.data());
    k::shiftRows(r.T * r.k, r.El, idx, pos.data(),
                 twoWay.outputReceived.data(), recvPos.data());
  }

  /// Records the first error; every exchange then moves nothing, on every
  /// rank that found it.
  void fail(const Var &r, const std::string &why) {
    if (error.empty())
      error = why;
    std::vector<int64_t> zero(r.G, 0);
    for (PeerPlan *p : {toExperts.get(), toTokens.get(), bothWays.get()})
      p->sendCount = p->sendOffset = p->recvCount = p->recvOffset = zero;
  }
};

moe_rt_status exchange(moe_rt_stream s, moe_rt_comm comm,
                       std::shared_ptr<const PeerPlan> plan,
                       std::vector<float> &from, std::vector<float> &to) {
  return mpi::allToAllPlanned(s, comm, plan, from.data(), to.data());
}

/// Every rank's counts into st->all, after route(): all-gathered, or, with
/// the layer's exchanged counts (r.allCounts), already cut from them by
/// route(), with no collective: the chunks of a layer share one exchange.
moe_rt_status gatherCounts(moe_rt_stream s, moe_rt_comm comm, const Var &r,
                           const std::shared_ptr<VarState> &st) {
  if (r.allCounts)
    return MOE_RT_OK;
  return mpi::allGatherCounts(s, comm, st->mine.data(), st->all.data(), r.E);
}

/// Whether every local expert's rows fit the buffer (x's second
/// dimension); else the message a variable expert call fails with.
bool rowsFit(const ExpertShape &f, int64_t G, const int64_t *rows,
             const char *call, std::string &message) {
  std::string why = varplan::expertRowsFit(G, f.experts, f.slots, rows);
  if (!why.empty())
    message = std::string(call) + ": " + why;
  return why.empty();
}

/// Combine's first half, forward and vjp alike: the token side's rows and
/// both plans, the expert side `pe` packed by source rank, and the
/// all-to-all-v that brings its filled rows to the tokens' ranks.
moe_rt_status bringToTokens(moe_rt_stream s, moe_rt_comm comm, const Var &r,
                            std::shared_ptr<VarState> st, const int64_t *idx,
                            const int64_t *rows, float *pe) {
  if (moe_rt_status e = task(s, [=] {
        st->route(r, idx);
        st->plan(r, rows);
        if (st->error.empty())
          k::recvToExpertMajor(r.G, r.El, r.R, r.M, rows, st->experts.data(),
                               pe, true);
      }))
    return e;
  return exchange(s, comm, st->toTokens, st->experts, st->tokens);
}

} // namespace

moe_rt_status dispatchV(moe_rt_stream s, moe_rt_comm comm, const Var &r,
                        const moe_rt_tensor *x, const moe_rt_tensor *indices,
                        moe_rt_tensor *out, moe_rt_tensor *rowsOut) {
  auto st = std::make_shared<VarState>(r);
  const int64_t *idx = i64(indices);
  float *px = f32(x), *py = f32(out);
  int64_t *rows = i64(rowsOut);
  if (moe_rt_status e = task(s, [=] {
        st->route(r, idx);
        k::gatherRows(r.T, r.k, r.M, st->pos.data(), px, st->tokens.data());
      }))
    return e;
  if (moe_rt_status e = gatherCounts(s, comm, r, st))
    return e;
  if (moe_rt_status e = task(s, [=] {
        varplan::rowsFromCounts(r, st->all.data(), rows);
        if (std::string why = varplan::overBound(r, st->all.data());
            !why.empty()) {
          st->fail(r, why);
          // What reads `rows` next sees an empty dispatch, not the load.
          std::fill(rows, rows + r.El * r.G, 0);
        } else {
          st->plan(r, rows);
        }
      }))
    return e;
  if (moe_rt_status e = exchange(s, comm, st->toExperts, st->tokens,
                                 st->experts))
    return e;
  return finishOp(s, "moe_rt_dispatch_v", st, [=] {
    k::recvToExpertMajor(r.G, r.El, r.R, r.M, rows, st->experts.data(), py,
                         false);
  });
}

moe_rt_status dispatchVGrad(moe_rt_stream s, moe_rt_comm comm, const Var &r,
                            const moe_rt_tensor *indices,
                            const moe_rt_tensor *dout, moe_rt_tensor *dx) {
  auto st = std::make_shared<VarState>(r);
  auto rows = std::make_shared<std::vector<int64_t>>(r.El * r.G);
  const int64_t *idx = i64(indices);
  float *pd = f32(dout), *pdx = f32(dx);
  if (moe_rt_status e = task(s, [=] { st->route(r, idx); }))
    return e;
  // The vjp's primals do not hold the forward's rows: count again.
  if (moe_rt_status e = gatherCounts(s, comm, r, st))
    return e;
  if (moe_rt_status e = task(s, [=] {
        varplan::rowsFromCounts(r, st->all.data(), rows->data());
        if (std::string why = varplan::overBound(r, st->all.data());
            !why.empty())
          st->fail(r, why);
        else
          st->plan(r, rows->data());
        if (st->error.empty())
          k::recvToExpertMajor(r.G, r.El, r.R, r.M, rows->data(),
                               st->experts.data(), pd, true);
      }))
    return e;
  if (moe_rt_status e = exchange(s, comm, st->toTokens, st->experts,
                                 st->tokens))
    return e;
  return finishOp(s, "moe_rt_dispatch_v_grad", st, [=] {
    std::fill(pdx, pdx + r.T * r.M, 0.0f);
    k::scatterAddRows(r.T, r.k, r.M, st->pos.data(), st->tokens.data(), pdx);
  });
}

moe_rt_status combineV(moe_rt_stream s, moe_rt_comm comm, const Var &r,
                       const moe_rt_tensor *rowsIn,
                       const moe_rt_tensor *expertOut,
                       const moe_rt_tensor *indices,
                       const moe_rt_tensor *weights, moe_rt_tensor *out) {
  auto st = std::make_shared<VarState>(r);
  const int64_t *idx = i64(indices), *rows = i64(rowsIn);
  float *pe = f32(expertOut), *pw = f32(weights), *py = f32(out);
  if (moe_rt_status e = bringToTokens(s, comm, r, st, idx, rows, pe))
    return e;
  return finishOp(s, "moe_rt_combine_v", st, [=] {
    k::combineRows(r.T, r.k, r.M, st->pos.data(), pw, st->tokens.data(), py);
  });
}

moe_rt_status combineVGrad(moe_rt_stream s, moe_rt_comm comm, const Var &r,
                           const moe_rt_tensor *rowsIn,
                           const moe_rt_tensor *expertOut,
                           const moe_rt_tensor *indices,
                           const moe_rt_tensor *weights,
                           const moe_rt_tensor *dout, moe_rt_tensor *dexpertOut,
                           moe_rt_tensor *dweights) {
  auto st = std::make_shared<VarState>(r, /*bothWays=*/true);
  const int64_t *idx = i64(indices), *rows = i64(rowsIn);
  float *pe = f32(expertOut), *pw = f32(weights), *pdy = f32(dout),
        *pde = f32(dexpertOut), *pdw = f32(dweights);
  // One exchange both ways (no state kept from the forward): the gradient
  // rows w dy go to the experts while the expert outputs come to the
  // tokens again, for the gate weights' gradient. The gradient rows need
  // nothing from the outputs, so they are written before it starts.
  if (moe_rt_status e = task(s, [=] {
        st->route(r, idx);
        st->planBothWays(r, idx, rows);
        if (!st->error.empty())
          return;
        float *send = st->sendBoth.data();
        k::combineRowsBackward(r.T, r.k, r.M, st->sendPos.data(), pw, pdy,
                               send);
        k::recvToExpertMajor(r.G, r.El, r.R, r.M, rows, send, pe, true,
                             st->twoWay.outputSent.data());
      }))
    return e;
  if (moe_rt_status e =
          exchange(s, comm, st->bothWays, st->sendBoth, st->recvBoth))
    return e;
  return finishOp(s, "moe_rt_combine_v_grad", st, [=] {
    float *recv = st->recvBoth.data();
    k::combineWeightsBackward(r.T, r.k, r.M, st->recvPos.data(), recv, pdy,
                              pdw);
    k::recvToExpertMajor(r.G, r.El, r.R, r.M, rows, recv, pde, false,
                         st->twoWay.gradReceived.data());
  });
}

moe_rt_status exchangeCounts(moe_rt_stream s, moe_rt_comm comm,
                             int64_t experts, int64_t block,
                             const moe_rt_tensor *indices, moe_rt_tensor *out) {
  struct State {
    std::vector<int64_t> mine;
    std::string error;
  };
  auto st = std::make_shared<State>();
  st->mine.assign(experts, 0);
  const int64_t *idx = i64(indices);
  int64_t n = moe_rt_tensor_numel(indices);
  // A choice outside [0, E) is counted nowhere (every rank still takes
  // part in the all-gather) and fails the op after it.
  if (moe_rt_status e = task(s, [=] {
        for (int64_t i = 0; i < n; ++i) {
          if (idx[i] >= 0 && idx[i] < experts)
            ++st->mine[idx[i]];
          else if (st->error.empty())
            st->error = (block >= 0 ? "block " + std::to_string(block) + ": "
                                    : std::string()) +
                        "routing choice " + std::to_string(i) + " is expert " +
                        std::to_string(idx[i]) + ", not in [0, " +
                        std::to_string(experts) + ")";
        }
      }))
    return e;
  if (moe_rt_status e =
          mpi::allGatherCounts(s, comm, st->mine.data(), i64(out), experts))
    return e;
  return finishOp(s, "moe_rt_exchange_counts", st, [] {});
}

moe_rt_status rowsSum(moe_rt_stream s, int64_t n, const moe_rt_tensor *rows,
                      moe_rt_tensor *total, bool accumulate) {
  const int64_t *pr = i64(rows);
  int64_t *pt = i64(total);
  return task(s, [=] {
    for (int64_t i = 0; i < n; ++i)
      pt[i] = (accumulate ? pt[i] : 0) + pr[i];
  });
}

moe_rt_status rowsWindow(moe_rt_stream s, const RowsWindowShape &w,
                         const moe_rt_tensor *total,
                         const moe_rt_tensor *chunkRows,
                         const moe_rt_tensor *chunk, moe_rt_tensor *out) {
  const int64_t *pt = i64(total), *pc = i64(chunkRows);
  const float *px = f32(chunk);
  float *py = f32(out);
  return enqueue(s, [=](std::string &message) {
    std::vector<k::WindowBlock> blocks(w.G);
    for (int64_t l = 0; l < w.El; ++l) {
      const int64_t *total = pt + l * w.G, *have = pc + l * w.G;
      if (int64_t g = varplan::windowBlocks(w, total, have, blocks.data());
          g >= 0) {
        message = "moe_rt_rows_window: " + varplan::windowFault(w, l, g, total,
                                                                 have);
        return MOE_RT_INVALID_ARGUMENT;
      }
      for (const k::WindowBlock &b : blocks)
        for (int64_t q = 0; q < b.want.size(); ++q)
          if (int64_t src = k::windowSource(b, q); src >= 0)
            std::copy(px + (l * w.chunkRows + src) * w.M,
                      px + (l * w.chunkRows + src + 1) * w.M,
                      py + (l * w.outRows + b.to + q) * w.M);
    }
    return MOE_RT_OK;
  });
}

moe_rt_status rowsPart(moe_rt_stream s, int64_t n, int64_t part, int64_t parts,
                       moe_rt_tensor *rows) {
  int64_t *pr = i64(rows);
  return task(s, [=] {
    for (int64_t i = 0; i < n; ++i) {
      k::PartRange p = k::partRange(pr[i], part, parts);
      pr[i] = p.end - p.first;
    }
  });
}

moe_rt_status expertV(moe_rt_stream s, moe_rt_activation act,
                      const ExpertShape &f, const moe_rt_tensor *rowsIn,
                      const moe_rt_tensor *x, const moe_rt_tensor *up,
                      const moe_rt_tensor *gate, const moe_rt_tensor *down,
                      moe_rt_tensor *out) {
  const int64_t *rows = i64(rowsIn);
  int64_t G = rowsIn->shape[1];
  float *px = f32(x), *pu = f32(up), *pg = f32(gate), *pd = f32(down),
        *py = f32(out);
  bool keep = keeping(s);
  CallSite site = expertSite(act, f, px, pu, pg, pd, rows);
  return enqueue(s, [=](std::string &message) {
    int64_t R = f.slots, m = f.m, h = f.h;
    if (!rowsFit(f, G, rows, "moe_rt_expert_v", message))
      return MOE_RT_INVALID_ARGUMENT;
    std::shared_ptr<KeptExpert> kept;
    if (keep) {
      kept = keptExperts().acquire();
      kept->filled.resize(f.experts);
      for (int64_t l = 0; l < f.experts; ++l)
        kept->filled[l] = varplan::filledRows(G, l, rows);
      int64_t all = kept->offset(f.experts);
      kept->hidden.resize(all * h);
      kept->gated.resize(pg ? all * h : 0);
    }
    for (int64_t l = 0; l < f.experts; ++l) {
      int64_t n = varplan::filledRows(G, l, rows);
      float *y = py + l * R * m;
      k::ExpertSaved<float> into;
      if (kept) {
        int64_t at = kept->offset(l) * h;
        into = {kept->hidden.data() + at, pg ? kept->gated.data() + at : nullptr};
      }
      if (n > 0)
        k::expertForward(k::Activation(act), 1, n, m, h, px + l * R * m,
                         pu + l * m * h, pg ? pg + l * m * h : nullptr,
                         pd + l * h * m, y, into);
      std::fill(y + n * m, y + R * m, 0.0f);
    }
    if (kept)
      keptExperts().publish(site, std::move(kept));
    return MOE_RT_OK;
  });
}

moe_rt_status expertVGrad(moe_rt_stream s, moe_rt_activation act,
                          const ExpertShape &f, const moe_rt_tensor *rowsIn,
                          const moe_rt_tensor *x, const moe_rt_tensor *up,
                          const moe_rt_tensor *gate, const moe_rt_tensor *down,
                          const moe_rt_tensor *dout, moe_rt_tensor *dx,
                          moe_rt_tensor *dup, moe_rt_tensor *dgate,
                          moe_rt_tensor *ddown) {
  const int64_t *rows = i64(rowsIn);
  int64_t G = rowsIn->shape[1];
  float *px = f32(x), *pu = f32(up), *pg = f32(gate), *pd = f32(down),
        *pdy = f32(dout), *pdx = f32(dx), *pdu = f32(dup),
        *pdg = gate ? f32(dgate) : nullptr, *pdd = f32(ddown);
  bool keep = keeping(s);
  CallSite site = expertSite(act, f, px, pu, pg, pd, rows);
  return enqueue(s, [=](std::string &message) {
    if (!rowsFit(f, G, rows, "moe_rt_expert_v_grad", message)) {
      for (moe_rt_tensor *g : {dx, dup, dgate, ddown})
        zero(g);
      return MOE_RT_INVALID_ARGUMENT;
    }
    std::shared_ptr<KeptExpert> kept =
        keep ? keptExperts().take(site) : nullptr;
    int64_t R = f.slots, m = f.m, h = f.h;
    for (int64_t l = 0; l < f.experts; ++l) {
      int64_t n = varplan::filledRows(G, l, rows);
      int64_t w = l * m * h, a = l * R * m;
      // Each gradient is written once (the kernel's first GEMM into it
      // overwrites): only what no GEMM writes is zeroed.
      std::fill(pdx + a + n * m, pdx + a + R * m, 0.0f);
      if (n == 0) {
        for (float *g : {pdu, pdg, pdd})
          if (g)
            std::fill(g + w, g + w + m * h, 0.0f);
        continue;
      }
      k::ExpertSaved<const float> saved;
      if (kept && kept->filled[l] == n) {
        int64_t at = kept->offset(l) * h;
        saved = {kept->hidden.data() + at,
                 pg ? kept->gated.data() + at : nullptr};
      }
      k::expertBackward(k::Activation(act), 1, n, m, h, px + a, pu + w,
                        pg ? pg + w : nullptr, pd + w, pdy + a, pdx + a,
                        pdu + w, pdg ? pdg + w : nullptr, pdd + w, saved,
                        /*accumulate=*/false);
    }
    keptExperts().release(std::move(kept));
    return MOE_RT_OK;
  });
}

} // namespace moe_rt::cpu
