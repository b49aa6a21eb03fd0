//===- RoutingLoads.h - recorded routing for the simulator -----*- C++ -*-===//
//
// Trace-driven simulation (docs/load-aware.md §6): `--moe-simulate` with
// `routing-trace=FILE` prices each dispatch, combine and expert task of
// (block l, micro-batch r) from the routing trace's record (step s, r, l)
// instead of uniform routing. A token row moves once per chosen expert,
// from its sample's rank to its expert's rank (the variable-count
// exchange); at most `capacity` rows per (source rank, expert) when the op
// has one (the rest are dropped). Each rank's intra- and inter-node rows
// go through the profile's per-link alpha-beta, and the collective ends
// with the slowest rank; each rank's experts compute their received rows,
// and the slowest rank gates the combine. The trace is read with
// moe_planning's one reader (routing_trace.h).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_ROUTINGLOADS_H
#define MOE_ANALYSIS_ROUTINGLOADS_H

#include "moe_rt/routing_trace.h"

#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir::moe {

/// One dispatch's routing over the ranks, in token rows.
struct DispatchLoad {
  /// Per rank: rows sent to, and received from, other ranks of its node
  /// (intra) and of other nodes (inter). A combine moves the same rows
  /// back, with send and receive swapped.
  std::vector<int64_t> sendIntra, sendInter, recvIntra, recvInter;
  /// Per rank: rows its experts receive (its own included).
  std::vector<int64_t> expertRows;
};

/// What the simulated step's dispatch expects of the trace.
struct DispatchShape {
  int64_t block = 0, micro = 0;
  int64_t ranks = 1, ranksPerNode = 1; ///< the op's group (CostModel)
  int64_t samplesPerRank = 0, tokens = 0, experts = 0;
  std::optional<int64_t> capacity;
};

class RoutingLoads {
public:
  /// Reads the trace at `path` and keeps step `step` (nullopt: its first
  /// step). Errors name the file (the reader's FILE:LINE messages) or the
  /// missing step.
  static llvm::Expected<std::unique_ptr<RoutingLoads>>
  load(const std::string &path, std::optional<int64_t> step);

  /// The load of the dispatch `shape` describes, or an error naming the
  /// trace and what in it disagrees with the step.
  llvm::Expected<DispatchLoad> loadOf(const DispatchShape &shape) const;

  int64_t step() const { return chosenStep; }

private:
  std::string path;
  int64_t chosenStep = 0;
  moe_rt::planning::TraceHeader header;
  /// The chosen step's records by (micro, block).
  std::map<std::pair<int64_t, int64_t>, moe_rt::planning::TraceRecord>
      records;
};

} // namespace mlir::moe

#endif // MOE_ANALYSIS_ROUTINGLOADS_H
