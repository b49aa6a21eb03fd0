//===- ShardRowsCosts.cpp - moe.gather_rows / moe.scatter_rows prices -----===//
//
// Expert sharding on the variable-count path moves a node's routed rows,
// not the E_l x R x M buffers: the cost model charges the bytes of the
// rows the all-to-all-v brings the node, at the expected load (T·k rows per
// rank spread evenly, as the variable-count dispatch is priced) or, with a
// routing trace, the node whose experts receive the most rows. nccl-tests'
// size, as for shard.all_gather / shard.reduce_scatter: the whole gathered
// tensor on each rank (an all-gather's result, a reduce-scatter's input).
// The gather also exchanges every rank's E_l x G counts first (and so does
// its vjp, the reduce-scatter-v, whose primals hold no gathered counts).
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/CostModel.h"
#include "moe/Analysis/OpCosts.h"
#include "moe/Analysis/RoutingLoads.h"
#include "moe/Analysis/Tasks.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::moe;

namespace {

int64_t dimOf(Value v, unsigned i) {
  return cast<ShapedType>(v.getType()).getDimSize(i);
}

/// The dispatch whose rows a rows collective moves (its counts' producer).
DispatchOp dispatchOf(Operation *forward) {
  Value rows = forward->getOperand(1);
  if (auto gather = rows.getDefiningOp<GatherRowsOp>())
    rows = gather.getRows();
  return rows.getDefiningOp<DispatchOp>();
}

} // namespace

FailureOr<TaskCost> CostModel::shardRowsCost(Operation *op,
                                             Operation *forward) {
  auto collective = cast<CollectiveOpInterface>(forward);
  auto group = groupShape(op, collective.getGridAttr(), collective.getAxes());
  if (failed(group))
    return failure();
  auto [shards, perNode] = *group;
  DispatchOp dispatch = dispatchOf(forward);
  if (!dispatch)
    return op->emitOpError() << "has no cost model: its rows do not come "
                                "from a variable-count dispatch";
  Value tokens = dispatch.getInput();
  auto type = cast<ShapedType>(tokens.getType());
  double rowBytes =
      dimOf(tokens, 2) * ((type.getElementTypeBitWidth() + 7) / 8);
  // Expected: each of the node's S ranks brought T·k rows into the node's
  // experts (a rank's dispatch sends T·k rows to the group's experts, and
  // the group's ranks each receive as many on average).
  double nodeRows =
      double(cast<ShapedType>(dispatch.getIndices().getType())
                 .getNumElements()) *
      shards;
  if (routing) {
    // The plain step's view of the trace: the dispatch's and this group's
    // ranks together, S per node; a node's experts are its ranks' experts.
    FailureOr<std::pair<int64_t, int64_t>> inter = groupShape(
        op, dispatch.getGridAttr(), dispatch.getAxes());
    if (failed(inter))
      return failure();
    TaskAttr task = getTask(dispatch);
    if (!task)
      return op->emitOpError() << "has no task label on its dispatch: the "
                                  "trace-driven simulation matches tasks to "
                                  "records by (block, micro-batch)";
    DispatchShape shape;
    shape.block = task.getBlock();
    shape.micro = task.getMicro();
    shape.ranks = inter->first * shards;
    shape.ranksPerNode = shards;
    shape.samplesPerRank = dimOf(dispatch.getIndices(), 0);
    shape.tokens = dimOf(dispatch.getIndices(), 1);
    shape.experts = dispatch.getNumExperts();
    llvm::Expected<DispatchLoad> load = routing->loadOf(shape);
    if (!load)
      return op->emitOpError() << llvm::toString(load.takeError());
    nodeRows = 0;
    for (size_t node = 0; node * shards < load->expertRows.size(); ++node) {
      double rows = 0;
      for (int64_t j = 0; j < shards; ++j)
        rows += load->expertRows[node * shards + j];
      nodeRows = std::max(nodeRows, rows);
    }
  }
  // The gather's vjp is a reduce-scatter-v, the scatter's an all-gather-v.
  bool gather = isa<GatherRowsOp>(forward);
  bool gathers = gather == (op == forward);
  TaskCost c;
  c.communication = true;
  c.bytes = nodeRows * rowBytes;
  c.us = collectiveUs(profile,
                      gathers ? CollectiveKind::AllGather
                              : CollectiveKind::ReduceScatter,
                      c.bytes * workScale, shards, perNode) +
         profile.launchUs;
  // The gather exchanges the ranks' E_l x G counts first, and so does its
  // vjp (the scatter's gathered counts are its operand).
  if (gather) {
    double counts =
        4.0 * cast<ShapedType>(forward->getOperand(1).getType())
                  .getNumElements() *
        shards;
    c.us += collectiveUs(profile, CollectiveKind::AllGather,
                         counts * workScale, shards, perNode);
  }
  c.link = collectiveLink(shards, perNode);
  return c;
}
