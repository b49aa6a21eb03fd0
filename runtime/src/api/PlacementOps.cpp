//===- PlacementOps.cpp - NetMoE's planner and sample moves: checks -------===//
//
// moe_rt_plan_placement / moe_rt_move_samples (ops.h): each checks its
// arguments and hands the op to the CPU backend
// (src/cpu/CpuPlacementOps.cpp) or, move_samples on a CUDA stream, the
// CUDA one (src/cuda/CudaVarRoutingOps.h). The planner is host code on
// either: on a CUDA stream it runs staged through host copies
// (planStaged). The placing combine's entry points sit with the other
// variable-count routing calls (VarRoutingOps.cpp).
//
//===----------------------------------------------------------------------===//

#include "OpChecks.h"

#include "../StagedOnHost.h"
#include "../cpu/CpuOps.h"
#if MOE_RT_HAVE_CUDA
#include "../cuda/CudaVarRoutingOps.h"
#endif

using namespace moe_rt;

namespace {

/// The planner on a CUDA stream: NetMoE's solve is host code, so it runs
/// staged (StagedOnHost.h): the counts copied to the host, the CPU planner
/// (the same solve and predictor state as on a CPU step), the placement
/// copied back.
moe_rt_status planStaged(moe_rt_stream s, const cpu::PlacementShape &p,
                         const moe_rt_tensor *counts, moe_rt_tensor *place) {
  return stagedOnHost(s, {counts}, {place},
                      [&](moe_rt_stream host, moe_rt_tensor *in,
                          moe_rt_tensor *out) {
                        return cpu::planPlacement(host, p, in, out);
                      });
}

} // namespace

extern "C" {

moe_rt_status moe_rt_plan_placement(moe_rt_stream s, int64_t experts,
                                    int64_t nodes, int64_t per_node,
                                    int64_t block, int64_t micro,
                                    int64_t mode, const moe_rt_tensor *counts,
                                    moe_rt_tensor *place) {
  Check c{"moe_rt_plan_placement", backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .tensor(counts, "counts", MOE_RT_I64, 2)
      .tensor(place, "place", MOE_RT_I64, 1);
  if (c.status)
    return c.status;
  cpu::PlacementShape p;
  p.samples = dim(counts, 0);
  p.experts = experts;
  p.nodes = nodes;
  p.perNode = per_node;
  p.block = block;
  p.micro = micro;
  p.identity = mode == 1;
  p.predict = mode == 0;
  int64_t ranks = nodes * per_node;
  c.that(mode >= 0 && mode <= 2, "mode must be 0 (predict), 1 (identity) "
                                 "or 2 (gather only)")
      .that(nodes > 0 && per_node > 0, "the grid needs nodes and ranks")
      .that(dim(counts, 1) == experts, "counts must be samples x experts")
      .that(ranks > 0 && experts % ranks == 0,
            "experts must divide evenly over the group")
      .that(ranks > 0 && p.samples % ranks == 0,
            "the samples must divide evenly over the group")
      .size(place, "place", p.samples);
  if (c.status)
    return c.status;
  if (backendOf(s) == MOE_RT_CUDA)
    return planStaged(s, p, counts, place);
  return cpu::planPlacement(s, p, counts, place);
}

moe_rt_status moe_rt_move_samples(moe_rt_stream s, moe_rt_comm comm,
                                  const moe_rt_tensor *place,
                                  const moe_rt_tensor *x, moe_rt_tensor *out) {
  Check c{"moe_rt_move_samples", backendOf(s)};
  c.that(s != nullptr && comm != nullptr, "NULL stream or group")
      .tensor(place, "place", MOE_RT_I64, 1)
      .tensor(x, "x", MOE_RT_I64, 1)
      .tensor(out, "out", MOE_RT_I64, 1)
      .sizeOf(out, "out", x);
  if (c.status)
    return c.status;
  c.that(dim(x, 0) > 0, "x needs a batch dimension")
      .size(place, "place", moe_rt_comm_size(comm) * dim(x, 0));
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::moveSamples(s, comm, moe_rt_comm_size(comm),
                                      moe_rt_comm_rank(comm), dim(x, 0),
                                      moe_rt_tensor_numel(x) / dim(x, 0),
                                      i64(place), i64(x), i64(out)));
  return cpu::moveSamples(s, comm, place, x, out);
}

const char *moe_rt_placement_report(void) {
  return cpu::placementReport();
}

} // extern "C"
