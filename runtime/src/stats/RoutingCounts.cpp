//===- RoutingCounts.cpp - moe_rt_routing_counts: count, then all-gather ---===//
//
// moe.routing_counts on a CPU pool stream: a task counts this rank's
// token-choice indices per (sample, expert), the group's all-gather brings
// every rank's rows to every rank, and a last task writes them to the I64
// result and hands them to the routing log (RoutingLog.h). On a CUDA
// stream the same CPU call runs staged through host copies (countStaged).
//
// The gather moves the counts as F32: every count is at most N tokens, and
// N <= 2^24 (the trace format's bound, checked here), so each is exact in
// a float, and the collectives' one F32 path serves (no integer variant).
//
//===----------------------------------------------------------------------===//

#include "moe_rt/routing_stats.h"

#include "../Error.h"
#include "../StagedOnHost.h"
#include "../TensorAccess.h"
#include "../api/OnCuda.h"
#include "../cpu/CpuTasks.h"
#include "RoutingLog.h"

#include <memory>
#include <string>
#include <vector>

using namespace moe_rt;

namespace {

/// An F32 scratch tensor of `rows` x `cols`, alive while the tasks hold it.
struct FloatScratch {
  std::vector<float> data;
  moe_rt_tensor view{};
  FloatScratch(int64_t rows, int64_t cols) : data(rows * cols, 0.0f) {
    view.data = data.data();
    view.rank = 2;
    view.shape[0] = rows;
    view.shape[1] = cols;
    view.dtype = MOE_RT_F32;
    view.backend = MOE_RT_CPU;
  }
};

constexpr int64_t kMaxExactTokens = int64_t(1) << 24;

moe_rt_status checkCall(moe_rt_stream s, moe_rt_comm comm,
                        const moe_rt_routing_site *site,
                        const moe_rt_tensor *indices,
                        const moe_rt_tensor *out) {
  auto bad = [](const std::string &why) {
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_routing_counts: " + why);
  };
  if (!s || !comm || !site)
    return bad("NULL stream, group or site");
  if (!indices || !indices->data || indices->dtype != MOE_RT_I64 ||
      indices->rank != 3 || !out || !out->data || out->dtype != MOE_RT_I64 ||
      out->rank != 2)
    return bad("needs I64 indices B x N x k and an I64 result (G B) x E");
  int64_t g = moe_rt_comm_size(comm);
  if (site->experts < 1 || site->nodes < 1 || site->ranks_per_node < 1 ||
      site->nodes * site->ranks_per_node != g)
    return bad("the site's grid " + std::to_string(site->nodes) + " x " +
               std::to_string(site->ranks_per_node) +
               " does not span the group's " + std::to_string(g) + " ranks");
  if (indices->shape[1] > kMaxExactTokens)
    return bad("more than 2^24 tokens per sample");
  if (out->shape[0] != g * indices->shape[0] || out->shape[1] != site->experts)
    return bad("result must be " + std::to_string(g * indices->shape[0]) +
               " x " + std::to_string(site->experts) +
               " (group size x samples, experts)");
  return MOE_RT_OK;
}

/// On a CUDA stream the statistics are host work (the routing log, the
/// host planners that read them), so the call runs staged
/// (StagedOnHost.h): the indices copied to the host, the CPU call (its
/// all-gather over the group's MPI side), the matrix copied back. Every
/// rank does the same, so a bad index still fails every rank after the
/// all-gather.
moe_rt_status countStaged(moe_rt_stream s, moe_rt_comm comm,
                          moe_rt_routing_log *log,
                          const moe_rt_routing_site *site,
                          const moe_rt_tensor *indices, moe_rt_tensor *out) {
  if (indices->backend != MOE_RT_CUDA || out->backend != MOE_RT_CUDA)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_routing_counts: on a CUDA stream the tensors must be "
                "in CUDA memory");
  return stagedOnHost(s, {indices}, {out},
                      [&](moe_rt_stream host, moe_rt_tensor *in,
                          moe_rt_tensor *result) {
                        return moe_rt_routing_counts(host, comm, log, site, in,
                                                     result);
                      });
}

} // namespace

extern "C" moe_rt_status
moe_rt_routing_counts(moe_rt_stream s, moe_rt_comm comm,
                      moe_rt_routing_log *log,
                      const moe_rt_routing_site *site,
                      const moe_rt_tensor *indices, moe_rt_tensor *out) {
  if (moe_rt_status st = checkCall(s, comm, site, indices, out))
    return st;
  if (backendOf(s) == MOE_RT_CUDA)
    return countStaged(s, comm, log, site, indices, out);
  if (indices->backend != MOE_RT_CPU || out->backend != MOE_RT_CPU)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_routing_counts: tensors must be in CPU memory");
  const int64_t b = indices->shape[0], n = indices->shape[1],
                k = indices->shape[2], e = site->experts,
                g = moe_rt_comm_size(comm);
  auto local = std::make_shared<FloatScratch>(b, e);
  auto all = std::make_shared<FloatScratch>(g * b, e);
  auto badIndex = std::make_shared<int64_t>(-1);
  const int64_t *idx = i64(indices);
  // NetMoE Eq. 2: num[i][e] = tokens of sample i routed to expert e.
  if (moe_rt_status st = cpu::task(s, [=] {
        for (int64_t t = 0; t < b * n * k; ++t) {
          int64_t expert = idx[t];
          if (expert < 0 || expert >= e) {
            if (*badIndex < 0)
              *badIndex = t;
            continue;
          }
          local->data[(t / (n * k)) * e + expert] += 1.0f;
        }
      }))
    return st;
  if (moe_rt_status st = moe_rt_all_gather(s, comm, &local->view, &all->view))
    return st;
  moe_rt_routing_site where = *site;
  int64_t *result = i64(out);
  return cpu::enqueue(s, [=](std::string &message) {
    if (*badIndex >= 0) {
      message = "moe_rt_routing_counts: index " + std::to_string(*badIndex) +
                " routes to expert " + std::to_string(idx[*badIndex]) +
                ", outside [0, " + std::to_string(e) + ")";
      return MOE_RT_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < all->data.size(); ++i)
      result[i] = static_cast<int64_t>(all->data[i]);
    if (log)
      log->add(where, n, k, result, g * b);
    (void)local;
    return MOE_RT_OK;
  });
}
