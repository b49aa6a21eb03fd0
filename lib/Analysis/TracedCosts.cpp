//===- TracedCosts.cpp - dispatch, combine and experts from a trace -------===//
//
// The cost model's trace-driven prices (RoutingLoads.h has the model):
// the all-to-all's slowest rank over its intra- and inter-node rows, and
// the experts of the rank that receives the most rows.
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

/// The forward dispatch of `op`'s (block, micro): the one that routes the
/// tokens `op` moves or computes.
FailureOr<DispatchOp> forwardDispatch(Operation *op) {
  TaskAttr task = getTask(op);
  if (!task)
    return op->emitOpError()
           << "has no task label: the trace-driven simulation matches tasks "
              "to records by (block, micro-batch)";
  auto func = op->getParentOfType<FunctionOpInterface>();
  DispatchOp found;
  // Variable-count token chunks all route the whole batch (their `micro`
  // labels the chunk): the first chunk's record holds its routing.
  int64_t micro = tokenParts(op) > 1 ? 0 : task.getMicro();
  func->walk([&](DispatchOp d) {
    TaskAttr t = getTask(d);
    if (t && t.getPhase() == Phase::fwd && t.getBlock() == task.getBlock() &&
        t.getMicro() == micro) {
      found = d;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (!found)
    return op->emitOpError() << "has no forward dispatch of block "
                             << task.getBlock() << ", micro-batch "
                             << task.getMicro() << " to take its routing from";
  return found;
}

FailureOr<DispatchShape> shapeOf(Operation *op, DispatchOp d, int64_t size,
                                 int64_t perNode) {
  Value indices = d.getIndices();
  if (cast<ShapedType>(indices.getType()).getRank() != 3)
    return op->emitOpError() << "routes by expert choice; the trace-driven "
                                "simulation prices token-choice routing only";
  TaskAttr task = getTask(d);
  DispatchShape s;
  s.block = task.getBlock();
  s.micro = task.getMicro();
  s.ranks = size;
  s.ranksPerNode = perNode;
  s.samplesPerRank = dimOf(indices, 0);
  s.tokens = dimOf(indices, 1);
  s.experts = d.getNumExperts();
  s.capacity = d.getCapacity();
  return s;
}

} // namespace

std::pair<int64_t, int64_t> mlir::moe::groupPosition(ArrayRef<int64_t> shape,
                                                    ArrayRef<int16_t> axes,
                                                    int64_t rank) {
  SmallVector<int64_t> coord(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    coord[i] = rank % shape[i];
    rank /= shape[i];
  }
  int64_t index = 0, key = 0;
  for (int16_t a : axes)
    index = index * shape[a] + coord[a];
  for (auto [i, extent] : llvm::enumerate(shape))
    if (!llvm::is_contained(axes, static_cast<int16_t>(i)))
      key = key * extent + coord[i];
  return {index, key};
}

FailureOr<TaskCost> CostModel::tracedExchange(Operation *op,
                                              Operation *forward,
                                              int64_t size, int64_t perNode) {
  FailureOr<DispatchOp> d = forwardDispatch(op);
  if (failed(d))
    return failure();
  FailureOr<DispatchShape> shape = shapeOf(op, *d, size, perNode);
  if (failed(shape))
    return failure();
  llvm::Expected<DispatchLoad> load = routing->loadOf(*shape);
  if (!load)
    return op->emitOpError() << llvm::toString(load.takeError());
  Value tokensSide = d->getInput();
  auto type = cast<ShapedType>(tokensSide.getType());
  double rowBytes =
      dimOf(tokensSide, 2) * ((type.getElementTypeBitWidth() + 7) / 8);
  const CollectiveModel &links = profile.collective(CollectiveKind::AllToAll);
  // A combine sends back what the dispatch received: the larger of each
  // rank's two directions bounds either exchange. One that moves both ways
  // at once (a variable-count combine's vjp) sends and receives both.
  bool both = exchangesBothWays(op, forward);
  auto rows = [&](double send, double recv) {
    // A token chunk moves its part of each rank's rows.
    return (both ? send + recv : std::max(send, recv)) * rowBytes /
           tokenParts(op);
  };
  TaskCost c;
  c.communication = true;
  c.link = collectiveLink(size, perNode);
  for (int64_t j = 0; j < size; ++j) {
    double intra = rows(load->sendIntra[j], load->recvIntra[j]),
           inter = rows(load->sendInter[j], load->recvInter[j]);
    double us = std::max(intra > 0 ? links.intra.time(intra) : 0.0,
                         inter > 0 ? links.inter.time(inter) : 0.0);
    c.us = std::max(c.us, us);
    c.bytes = std::max(c.bytes, intra + inter);
  }
  c.us += profile.collectiveLatencyUs;
  c.us += profile.launchUs;
  return c;
}

FailureOr<TaskCost> CostModel::tracedExperts(Operation *op, ExpertOp expert) {
  FailureOr<DispatchOp> d = forwardDispatch(op);
  if (failed(d))
    return failure();
  FailureOr<std::pair<int64_t, int64_t>> group =
      groupShape(op, d->getGridAttr(), d->getAxes());
  if (failed(group))
    return failure();
  FailureOr<DispatchShape> shape =
      shapeOf(op, *d, group->first, group->second);
  if (failed(shape))
    return failure();
  llvm::Expected<DispatchLoad> load = routing->loadOf(*shape);
  if (!load)
    return op->emitOpError() << llvm::toString(load.takeError());
  int64_t busiest = *std::max_element(load->expertRows.begin(),
                                      load->expertRows.end());
  int64_t mine = busiest;
  if (rank) {
    FailureOr<shard::GridOp> grid =
        lookupGrid(op, d->getGridAttr(), symbols);
    if (failed(grid))
      return failure();
    int64_t index = groupPosition(grid->getShape(), d->getAxes(), *rank).first;
    mine = load->expertRows[index];
  }
  double rows = double(mine) / tokenParts(op);
  TaskCost c;
  c.flops = expertFlops(1, rows, dimOf(expert.getInput(), 2),
                        expert.getHiddenSize(), expert.isGated() ? 3 : 2);
  c.us = profile.gemm.time(c.flops);
  return c;
}
