//===- RoutingLog.cpp - one step's routing counts, and the trace ----------===//
//
// The routing log's C API (moe_rt/routing_stats.h) and its work: records
// in the trace format's order, the header from the first step, expert
// placement as expert parallelism lays it out (E/G consecutive experts per
// rank, as moe.dispatch's E_l x (G C) x M layout, unless the step has an
// expert placement: moe_rt_routing_log_set_expert_ranks), samples where the
// data loader put them (planning::contiguousPlacement: the gathered rows are in
// group-rank order).
//
//===----------------------------------------------------------------------===//

#include "RoutingLog.h"

#include "../Error.h"

#include <algorithm>
#include <cstdio>

using namespace moe_rt;
using namespace moe_rt::planning;

void moe_rt_routing_log::add(const moe_rt_routing_site &site, int64_t tokens,
                             int64_t topK, const int64_t *counts,
                             int64_t rows) {
  Pending p{site, tokens, topK,
            CountMatrix(static_cast<int>(rows), static_cast<int>(site.experts))};
  for (size_t i = 0; i < p.counts.values.size(); ++i)
    p.counts.values[i] = static_cast<uint32_t>(counts[i]);
  std::lock_guard<std::mutex> lock(mutex);
  pending.push_back(std::move(p));
}

std::vector<int> moe_rt_routing_log::placementOf(int experts, int ranks,
                                                 int64_t block) const {
  auto it = expertRanks.find(block);
  if (it == expertRanks.end())
    it = expertRanks.find(-1);
  if (it != expertRanks.end() && int(it->second.size()) == experts)
    return it->second;
  return expertParallelPlacement(experts, ranks);
}

std::string moe_rt_routing_log::openTrace(const std::string &path,
                                          const std::string &source) {
  if (writer || !tracePath.empty())
    return "a routing trace is already open";
  tracePath = path;
  traceSource = source;
  return "";
}

TraceHeader
moe_rt_routing_log::headerFor(const std::vector<Pending> &step) const {
  TraceHeader h;
  h.source = traceSource;
  const moe_rt_routing_site &first = step.front().site;
  h.grid = Grid{int(first.nodes), int(first.ranks_per_node)};
  h.samples = step.front().counts.rows;
  h.tokensPerSample = int(step.front().tokens);
  for (const Pending &p : step) {
    if (p.site.micro != first.micro)
      break;
    TraceBlock b;
    b.block = int(p.site.block);
    b.experts = int(p.site.experts);
    b.topK = int(p.topK);
    b.expertRank = placementOf(b.experts, h.grid.ranks(), p.site.block);
    h.blocks.push_back(std::move(b));
  }
  return h;
}

std::string moe_rt_routing_log::write(const std::vector<Pending> &step,
                                      int64_t number) {
  std::string error;
  if (!writer) {
    writer = std::make_unique<TraceWriter>();
    if (!writer->open(tracePath, headerFor(step), error))
      return error;
  }
  for (const Pending &p : step) {
    TraceRecord r;
    r.step = number;
    r.micro = int(p.site.micro);
    r.block = int(p.site.block);
    r.sampleRank = contiguousPlacement(
        p.counts.rows, int(p.site.nodes * p.site.ranks_per_node));
    r.counts = p.counts;
    if (!writer->write(r, error))
      return error;
  }
  return "";
}

/// "1.31 (block 7)"
static std::string ratioAt(double ratio, int64_t block) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f (block %lld)", ratio,
                static_cast<long long>(block));
  return text;
}

std::string moe_rt_routing_log::endStep(int64_t number) {
  std::vector<Pending> step;
  {
    std::lock_guard<std::mutex> lock(mutex);
    step.swap(pending);
  }
  balance.clear();
  if (step.empty())
    return "";
  // The pool finishes dispatches in any order across streams; the trace
  // wants (micro, block).
  std::stable_sort(step.begin(), step.end(),
                   [](const Pending &a, const Pending &b) {
                     return std::make_pair(a.site.micro, a.site.block) <
                            std::make_pair(b.site.micro, b.site.block);
                   });
  double worstRank = 0, worstExpert = 0;
  int64_t rankBlock = 0, expertBlock = 0;
  for (const Pending &p : step) {
    int ranks = int(p.site.nodes * p.site.ranks_per_node);
    LoadBalance lb =
        loadBalance(p.counts, placementOf(p.counts.experts, ranks, p.site.block),
                    ranks);
    if (lb.rankRatio() > worstRank)
      worstRank = lb.rankRatio(), rankBlock = p.site.block;
    if (lb.expertRatio() > worstExpert)
      worstExpert = lb.expertRatio(), expertBlock = p.site.block;
  }
  balance = "step " + std::to_string(number) +
            " balance: tokens/rank max/mean " + ratioAt(worstRank, rankBlock) +
            ", tokens/expert max/mean " + ratioAt(worstExpert, expertBlock);
  if (tracePath.empty() || closed)
    return "";
  std::string error = write(step, number);
  return error.empty() ? "" : "routing trace: " + error;
}

std::string moe_rt_routing_log::close() {
  if (closed || !writer)
    return "";
  closed = true;
  std::string error;
  return writer->close(error) ? "" : "routing trace: " + error;
}

extern "C" {

moe_rt_routing_log *moe_rt_routing_log_create(void) {
  return new moe_rt_routing_log();
}

void moe_rt_routing_log_destroy(moe_rt_routing_log *log) {
  if (!log)
    return;
  std::string error = log->close();
  if (!error.empty())
    std::fprintf(stderr, "moe runtime: %s\n", error.c_str());
  delete log;
}

moe_rt_status moe_rt_routing_log_open_trace(moe_rt_routing_log *log,
                                            const char *path,
                                            const char *source) {
  if (!log || !path || !*path)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_routing_log_open_trace: NULL log or path");
  std::string error = log->openTrace(path, source ? source : "");
  return error.empty() ? MOE_RT_OK : fail(MOE_RT_INVALID_ARGUMENT, error);
}

moe_rt_status moe_rt_routing_log_end_step(moe_rt_routing_log *log,
                                          int64_t step) {
  if (!log)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_routing_log_end_step: NULL log");
  std::string error = log->endStep(step);
  return error.empty() ? MOE_RT_OK : fail(MOE_RT_INVALID_ARGUMENT, error);
}

moe_rt_status moe_rt_routing_log_set_expert_ranks(moe_rt_routing_log *log,
                                                  int64_t block,
                                                  const int64_t *ranks,
                                                  int64_t experts) {
  if (!log || (experts > 0 && !ranks))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_routing_log_set_expert_ranks: NULL log or ranks");
  if (block < 0)
    log->expertRanks.clear(); // one placement for every block
  log->expertRanks[std::max<int64_t>(block, -1)].assign(
      ranks, ranks + std::max<int64_t>(experts, 0));
  return MOE_RT_OK;
}

const char *moe_rt_routing_log_balance(const moe_rt_routing_log *log) {
  return log ? log->balance.c_str() : "";
}

moe_rt_status moe_rt_routing_log_close(moe_rt_routing_log *log) {
  if (!log)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_routing_log_close: NULL log");
  std::string error = log->close();
  return error.empty() ? MOE_RT_OK : fail(MOE_RT_INVALID_ARGUMENT, error);
}

} // extern "C"
