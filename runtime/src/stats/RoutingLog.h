//===- RoutingLog.h - one step's routing counts, and the trace --*- C++ -*-===//
//
// The object behind moe_rt_routing_log (moe_rt/routing_stats.h): the
// moe_rt_routing_counts tasks add each gathered matrix (from the pool's
// threads), and after the step has synchronised end_step writes the
// step's records to the routing trace (moe_planning's TraceWriter, the
// format's one writer) and computes the balance line (loadBalance).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_STATS_ROUTINGLOG_H
#define MOE_RT_SRC_STATS_ROUTINGLOG_H

#include "moe_rt/routing_stats.h"
#include "moe_rt/routing_trace.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct moe_rt_routing_log {
  /// Adds the gathered `rows` x site.experts counts of one dispatch, whose
  /// samples hold `tokens` tokens routed to `topK` experts each.
  void add(const moe_rt_routing_site &site, int64_t tokens, int64_t topK,
           const int64_t *counts, int64_t rows);
  /// "" or what went wrong.
  std::string openTrace(const std::string &path, const std::string &source);
  std::string endStep(int64_t step);
  std::string close();

  std::string balance; ///< the last ended step's balance line
  /// Expert -> rank of each block's expert placement (-1: every block
  /// without its own); none: expert parallelism's layout.
  std::map<int64_t, std::vector<int>> expertRanks;

private:
  /// Expert -> rank for a block of `experts` over `ranks`.
  std::vector<int> placementOf(int experts, int ranks, int64_t block) const;
  struct Pending {
    moe_rt_routing_site site;
    int64_t tokens, topK;
    moe_rt::planning::CountMatrix counts;
  };
  moe_rt::planning::TraceHeader headerFor(
      const std::vector<Pending> &step) const;
  std::string write(const std::vector<Pending> &step, int64_t number);

  std::mutex mutex; ///< guards `pending` (added to from the pool's threads)
  std::vector<Pending> pending;
  std::string tracePath, traceSource;
  std::unique_ptr<moe_rt::planning::TraceWriter> writer;
  bool closed = false;
};

#endif // MOE_RT_SRC_STATS_ROUTINGLOG_H
