//===- CpuPlacementOps.cpp - NetMoE's placement in the step, CPU ----------===//
//
// The three calls that make a sample placement a run-time value
// (docs/netmoe-in-the-step.md):
//  - planPlacement: NetMoE's two-stage solve (moe_planning) on the
//    all-gathered counts, inline on the host stream that runs it (a host
//    planner: the stream's thread is the planner's, and the schedule's
//    events start and join it, docs/host-planners.md); every rank solves
//    the same problem deterministically, so no broadcast;
//  - moveSamples: whole samples of an integer tensor (labels) to their new
//    ranks, by an all-gather and a local pick (labels are tiny);
//  - the placing variable-count combine and its vjp: expert output rows
//    go straight to the samples' new ranks (kernels/Placement.h).
//
//===----------------------------------------------------------------------===//

#include "CpuOps.h"
#include "CpuTasks.h"

#include "../CollectivePlan.h"
#include "../VarRoutePlan.h"
#include "../mpi/MpiCollectives.h"
#include "kernels/Placement.h"

#include "moe_rt/sample_placement.h"
#include "moe_rt/step_predictor.h"

#include <cstdio>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace moe_rt::cpu {

namespace {
namespace k = moe_rt::kernels;
using coll::PeerPlan;

/// What a placing combine's tasks share: the group's routing, the routes,
/// both plans, the buffers, and a deferred error.
struct PlacedState {
  std::vector<int64_t> allIdx;
  std::vector<float> allW, send, recv, allDw;
  k::PlacedRoutes routes;
  std::shared_ptr<PeerPlan> toTokens = std::make_shared<PeerPlan>(),
                            toExperts = std::make_shared<PeerPlan>();
  std::string error;
};

/// Plans both exchanges from the gathered routing; on an error both move
/// nothing and the op's last task reports it (every rank finds the same).
void planPlaced(const VarRouteShape &r, int64_t B, const int64_t *place,
                PlacedState &st) {
  k::PlacedGroup g{r.G, r.rank, r.E, r.El, r.T, r.k, B, r.R,
                   st.allIdx.data(), place};
  if (st.error.empty())
    st.error = k::checkPlacement(g);
  if (st.error.empty())
    st.error = k::placedRoutes(g, st.routes);
  if (st.error.empty())
    st.error = coll::planAllToAllV(
        int(r.G), st.routes.sendCount.data(), st.routes.recvCount.data(), r.M,
        r.El * r.R, r.M, r.T * r.k, *st.toTokens);
  if (st.error.empty())
    st.error = coll::planAllToAllV(
        int(r.G), st.routes.recvCount.data(), st.routes.sendCount.data(), r.M,
        r.T * r.k, r.M, r.El * r.R, *st.toExperts);
  if (!st.error.empty()) {
    std::vector<int64_t> zero(r.G, 0);
    for (PeerPlan *p : {st.toTokens.get(), st.toExperts.get()})
      p->sendCount = p->sendOffset = p->recvCount = p->recvOffset = zero;
  }
}

/// The group's indices and weights on every rank, then the plans.
moe_rt_status gatherRouting(moe_rt_stream s, moe_rt_comm comm,
                            const VarRouteShape &r, int64_t B,
                            std::shared_ptr<PlacedState> st,
                            const int64_t *idx, const float *w,
                            const int64_t *place) {
  // Collectives take their buffers when queued: size them all now. The
  // expert side sends at most its E_l R rows, the token side receives its
  // T k choices.
  st->allIdx.resize(r.G * r.T * r.k);
  st->allW.resize(r.G * r.T * r.k);
  st->allDw.resize(r.G * r.T * r.k);
  st->send.resize(r.El * r.R * r.M);
  st->recv.resize(r.T * r.k * r.M);
  if (moe_rt_status e =
          mpi::allGatherCounts(s, comm, idx, st->allIdx.data(), r.T * r.k))
    return e;
  if (moe_rt_status e =
          mpi::allGather(s, comm, w, st->allW.data(), r.T * r.k))
    return e;
  return task(s, [=] {
    // An expert placement: the gathered choices as physical experts.
    if (r.slots)
      st->error = varplan::toPhysical(r, st->allIdx.data(),
                                      int64_t(st->allIdx.size()), st->allIdx);
    planPlaced(r, B, place, *st);
  });
}

/// One planner call's problem: the block's counts and, when predicted, the
/// next block's (rows in the same sample order).
struct PlacementInput {
  planning::CountMatrix counts, next;
  bool hasNext = false;
};

/// EP's layout: E/G experts per rank, in order.
std::vector<int> expertRanks(int64_t experts, int64_t ranks) {
  std::vector<int> rank(experts);
  for (int64_t e = 0; e < experts; ++e)
    rank[e] = int(e / (experts / ranks));
  return rank;
}

/// NetMoE's solve into `po` and `kept`; "" or the error.
std::string solvePlacement(const PlacementShape &p,
                           std::shared_ptr<const PlacementInput> in,
                           int64_t *po, std::shared_ptr<std::vector<int>> kept) {
  int64_t samples = p.samples, ranks = p.nodes * p.perNode;
  if (p.identity) {
    for (int64_t i = 0; i < samples; ++i)
      po[i] = i / (samples / ranks);
    return "";
  }
  std::vector<int> expertRank = expertRanks(p.experts, ranks), nextRank;
  planning::SamplePlacementProblem problem;
  problem.grid = planning::Grid{int(p.nodes), int(p.perNode)};
  problem.gather = {&in->counts, &expertRank};
  // Eq. 10's second term: the next block's dispatch from the new ranks,
  // its experts laid out by EP like this block's.
  if (in->hasNext && in->next.experts % ranks == 0) {
    nextRank = expertRanks(in->next.experts, ranks);
    problem.nextScatter = {&in->next, &nextRank};
  }
  planning::SamplePlacement placement;
  std::string why = planning::planSamplePlacement(problem, placement);
  if (!why.empty())
    return "moe_rt_plan_placement: block " + std::to_string(p.block) + ": " +
           why;
  for (int64_t i = 0; i < samples; ++i)
    po[i] = placement.sampleRank[i];
  *kept = std::move(placement.sampleRank);
  return "";
}

/// What the planners keep between calls: the next-block predictor and, per
/// micro-batch, the last solve (its placement moves the previous block's
/// counts into the next block's sample order). Calls come in the host
/// stream's order, the same on every rank of the group (step_predictor.h).
struct PlannerState {
  std::mutex lock;
  planning::StepPredictor predictor;
  struct Solve {
    std::string error;
    std::shared_ptr<std::vector<int>> place;
  };
  std::map<int64_t, Solve> previous; // by micro-batch
  std::string report;
};
PlannerState &planner() {
  static PlannerState s;
  return s;
}

/// The problem of one call: the counts, and the next block's prediction
/// (which also teaches the predictor the previous block's transition).
std::shared_ptr<PlacementInput> placementInput(const PlacementShape &p,
                                               const int64_t *pc) {
  auto in = std::make_shared<PlacementInput>();
  in->counts = planning::CountMatrix(int(p.samples), int(p.experts));
  for (int64_t i = 0; i < p.samples * p.experts; ++i)
    in->counts.values[i] = uint32_t(pc[i]);
  if (p.identity || !p.predict)
    return in;
  PlannerState &st = planner();
  std::lock_guard<std::mutex> guard(st.lock);
  const std::vector<int> *previous = nullptr;
  auto it = st.previous.find(p.micro);
  // The previous solve ran earlier on this host stream: it is complete.
  if (it != st.previous.end() && it->second.error.empty())
    previous = it->second.place.get();
  in->hasNext = st.predictor.beforeSolve(int(p.micro), int(p.block),
                                         in->counts, previous,
                                         int(p.nodes * p.perNode), in->next);
  return in;
}

} // namespace

moe_rt_status planPlacement(moe_rt_stream s, const PlacementShape &p,
                            const moe_rt_tensor *counts, moe_rt_tensor *out) {
  const int64_t *pc = i64(counts);
  int64_t *po = i64(out);
  return enqueue(s, [=](std::string &message) {
    // A host planner: this task runs on the host stream's thread, which
    // the schedule started after the counts exist (an event) and which the
    // first reader of the placement joins (an event), so the solve
    // overlaps the compute and communication streams and blocks neither.
    // The prediction runs here too, in the host stream's order, the same
    // on every rank.
    std::shared_ptr<const PlacementInput> in = placementInput(p, pc);
    auto kept = std::make_shared<std::vector<int>>();
    message = solvePlacement(p, in, po, kept);
    if (p.predict && !p.identity) {
      PlannerState &st = planner();
      std::lock_guard<std::mutex> guard(st.lock);
      st.previous[p.micro] = {message, kept};
    }
    return message.empty() ? MOE_RT_OK : MOE_RT_INVALID_ARGUMENT;
  });
}

const char *placementReport() {
  PlannerState &st = planner();
  std::lock_guard<std::mutex> guard(st.lock);
  planning::StepPredictor::Accuracy a = st.predictor.takeAccuracy();
  st.report.clear();
  if (a.blocks > 0) {
    char line[160];
    std::snprintf(line, sizeof line,
                  "netmoe: next-block prediction error %.3f over %d block(s) "
                  "(sum |predicted - true| / sum true)",
                  a.tokens > 0 ? a.absError / a.tokens : 0.0, a.blocks);
    st.report = line;
  }
  return st.report.c_str();
}

moe_rt_status moveSamples(moe_rt_stream s, moe_rt_comm comm,
                          const moe_rt_tensor *placeIn, const moe_rt_tensor *x,
                          moe_rt_tensor *out) {
  int64_t G = moe_rt_comm_size(comm), rank = moe_rt_comm_rank(comm);
  int64_t B = x->shape[0], row = moe_rt_tensor_numel(x) / B;
  auto all = std::make_shared<std::vector<int64_t>>(G * B * row);
  const int64_t *place = i64(placeIn), *px = i64(x);
  int64_t *py = i64(out);
  if (moe_rt_status e = mpi::allGatherCounts(s, comm, px, all->data(), B * row))
    return e;
  return enqueue(s, [=](std::string &message) {
    std::vector<int64_t> picks;
    std::string why = k::samplePicks(G, B, rank, place, picks);
    for (int64_t n = 0; n < int64_t(picks.size()) && n < B; ++n)
      std::copy(all->data() + picks[n] * row,
                all->data() + (picks[n] + 1) * row, py + n * row);
    if (why.empty())
      return MOE_RT_OK;
    message = "moe_rt_move_samples: " + why;
    return MOE_RT_INVALID_ARGUMENT;
  });
}

moe_rt_status combineVPlaced(moe_rt_stream s, moe_rt_comm comm,
                             const VarRouteShape &r, int64_t B,
                             const moe_rt_tensor *expertOut,
                             const moe_rt_tensor *indices,
                             const moe_rt_tensor *weights,
                             const moe_rt_tensor *residual,
                             const moe_rt_tensor *placeIn, moe_rt_tensor *out) {
  auto st = std::make_shared<PlacedState>();
  const int64_t *idx = i64(indices), *place = i64(placeIn);
  float *pe = f32(expertOut), *pw = f32(weights), *py = f32(out),
        *ph = residual ? f32(residual) : nullptr;
  if (moe_rt_status e = gatherRouting(s, comm, r, B, st, idx, pw, place))
    return e;
  if (moe_rt_status e = task(s, [=] {
        if (st->error.empty())
          k::placedSendRows(st->routes, r.M, st->allW.data(), pe, ph,
                            st->send.data());
      }))
    return e;
  if (moe_rt_status e = mpi::allToAllPlanned(s, comm, st->toTokens,
                                             st->send.data(), st->recv.data()))
    return e;
  return finishOp(s, "moe_rt_combine_v_place", st, [=] {
    k::placedGather(st->routes, r.T, r.k, r.M, st->recv.data(), py);
  });
}

moe_rt_status combineVPlacedGrad(
    moe_rt_stream s, moe_rt_comm comm, const VarRouteShape &r, int64_t B,
    const moe_rt_tensor *expertOut, const moe_rt_tensor *indices,
    const moe_rt_tensor *weights, const moe_rt_tensor *placeIn,
    const moe_rt_tensor *dout, moe_rt_tensor *dexpertOut,
    moe_rt_tensor *dweights, moe_rt_tensor *dresidual) {
  auto st = std::make_shared<PlacedState>();
  const int64_t *idx = i64(indices), *place = i64(placeIn);
  float *pe = f32(expertOut), *pw = f32(weights), *pdy = f32(dout),
        *pde = f32(dexpertOut), *pdw = f32(dweights),
        *pdh = dresidual ? f32(dresidual) : nullptr;
  if (moe_rt_status e = gatherRouting(s, comm, r, B, st, idx, pw, place))
    return e;
  // The forward's placement, reversed: cotangents from the samples' new
  // ranks back to the expert rows (nothing is solved again).
  if (moe_rt_status e = task(s, [=] {
        if (st->error.empty())
          k::placedScatterCotangents(st->routes, r.M, pdy, st->recv.data());
      }))
    return e;
  if (moe_rt_status e = mpi::allToAllPlanned(s, comm, st->toExperts,
                                             st->recv.data(), st->send.data()))
    return e;
  if (moe_rt_status e = task(s, [=] {
        std::fill(pde, pde + r.El * r.R * r.M, 0.0f);
        if (pdh)
          std::fill(pdh, pdh + r.El * r.R * r.M, 0.0f);
        std::fill(st->allDw.begin(), st->allDw.end(), 0.0f);
        if (st->error.empty())
          k::placedBackward(st->routes, r.M, st->allW.data(), pe,
                            st->send.data(), pde, pdh, st->allDw.data());
      }))
    return e;
  // Each weight's gradient was computed on its expert's rank: the sum over
  // the group (one non-zero term each) returns it to its token's rank.
  if (moe_rt_status e = mpi::reduceScatter(s, comm, st->allDw.data(), pdw,
                                           r.T * r.k))
    return e;
  return finishOp(s, "moe_rt_combine_v_place_grad", st, [] {});
}

} // namespace moe_rt::cpu
