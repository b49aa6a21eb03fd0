//===- CostModel.h - how long each task takes -------------------*- C++ -*-===//
//
// Task durations from a hardware profile's alpha-beta models and the op's
// shapes: GEMM-bound ops by flops, memory-bound ops by bytes moved,
// collectives by the bytes each rank sends, split into intra- and
// inter-node traffic that proceed concurrently (NetMoE §3.1: t = max(t_intra,
// t_inter)). Backward tasks (moe.vjp) cost backward_factor x the forward
// compute; the adjoint of a collective moves the same bytes.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_COSTMODEL_H
#define MOE_ANALYSIS_COSTMODEL_H

#include "moe/Analysis/HardwareProfile.h"
#include "moe/Analysis/OpCosts.h"
#include "moe/Analysis/PipelineDegree.h"
#include "moe/Dialect/Moe/MoeOps.h"

namespace mlir::moe {

class RoutingLoads;

/// Rank `rank` of a grid of `shape` (row-major coordinates) in the group
/// spanned by `axes`: its index within the group (row-major over the
/// coordinates of `axes`, in their order) and the key the group's ranks
/// share (row-major over the other axes' coordinates).
std::pair<int64_t, int64_t> groupPosition(ArrayRef<int64_t> shape,
                                          ArrayRef<int16_t> axes,
                                          int64_t rank);

/// The variable-count token chunks `op` belongs to (moe-token-pipeline on a
/// dropless layer): r of a dispatch's / combine's (or its vjp's) `part [j,
/// r]`, of the dispatch or moe.rows_window giving an expert its rows; 1
/// for anything else. Such a chunk moves and computes about 1/r of the
/// layer's routed rows.
int64_t tokenParts(Operation *op);

struct TaskCost {
  double us = 0.0;
  bool communication = false;
  double flops = 0.0; // GEMM work (compute tasks)
  double bytes = 0.0; // bytes moved (memory-bound) or sent (collectives)
  /// A collective's links: the simulator's three resources are compute,
  /// intra-node and inter-node communication.
  Link link = Link::None;
};

class CostModel {
public:
  explicit CostModel(const HardwareProfile &profile) : profile(profile) {}

  /// The cost of one task op; an error on `op` when its shapes are not
  /// static enough to cost or its group is malformed.
  FailureOr<TaskCost> cost(Operation *op);

  /// FSMoE's Eq. 1 for a task cut into chunks: its time with no work
  /// (start-up, launch) and the rest, which a chunk of 1/r of the work
  /// takes 1/r of. Exact for every alpha-beta formula; an all-to-all over
  /// both links takes the slower link's time at each size.
  FailureOr<ChunkedCost> chunkedCost(Operation *op);

  const HardwareProfile &getProfile() const { return profile; }

  /// Prices dispatch, combine and expert tasks from recorded routing
  /// (RoutingLoads.h; null: uniform routing). Not owned.
  void setRoutingLoads(const RoutingLoads *loads) { routing = loads; }
  bool hasRoutingLoads() const { return routing != nullptr; }

  /// Whose experts a traced expert task computes: nullopt (the default),
  /// the rank whose experts receive the most rows, which stands for every
  /// rank; a rank of the grid, that rank's own (the joint simulation of
  /// every rank, Simulator.cpp). Collectives end with their slowest rank
  /// either way.
  void setRank(std::optional<int64_t> r) { rank = r; }

private:
  FailureOr<TaskCost> forwardCost(Operation *op);
  FailureOr<TaskCost> collectiveCost(Operation *op, Operation *forward);
  /// Whether `op` is a variable-count combine's vjp, which the runtime runs
  /// as one all-to-all-v both ways (moe_rt_combine_v_grad): the gradient
  /// rows to the experts, the expert outputs to the tokens.
  static bool exchangesBothWays(Operation *op, Operation *forward);
  /// Ranks of the group spanned by `axes` of `grid` and how many of them
  /// share a node (axis 0 of a 2-D grid is nodes; a 1-D grid is packed
  /// gpus_per_node to a node).
  FailureOr<std::pair<int64_t, int64_t>>
  groupShape(Operation *op, FlatSymbolRefAttr grid, ArrayRef<int16_t> axes);

  /// moe.gather_rows / moe.scatter_rows and their vjps: the node's routed
  /// rows, expected or traced (ShardRowsCosts.cpp).
  FailureOr<TaskCost> shardRowsCost(Operation *op, Operation *forward);
  /// The trace-driven costs (TracedCosts.cpp).
  FailureOr<TaskCost> tracedExchange(Operation *op, Operation *forward,
                                     int64_t size, int64_t perNode);
  FailureOr<TaskCost> tracedExperts(Operation *op, ExpertOp expert);

  const HardwareProfile &profile;
  SymbolTableCollection symbols;
  const RoutingLoads *routing = nullptr;
  std::optional<int64_t> rank;
  /// The share of an op's work (bytes, flops) that is timed: 0 gives
  /// chunkedCost's start-up time.
  double workScale = 1.0;
};

} // namespace mlir::moe

#endif // MOE_ANALYSIS_COSTMODEL_H
