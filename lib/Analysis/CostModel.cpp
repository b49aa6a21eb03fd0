//===- CostModel.cpp - how long each task takes ---------------------------===//

#include "moe/Analysis/CostModel.h"
#include "moe/Analysis/ModelStats.h"
#include "moe/Analysis/OpCosts.h"
#include "moe/Target/ProfileOpClass.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <map>

using namespace mlir;
using namespace mlir::moe;

namespace {

double elementBytes(Type type) {
  auto shaped = cast<ShapedType>(type);
  return (shaped.getElementTypeBitWidth() + 7) / 8;
}

/// Bytes of a value; a dynamic dimension counts as `dynamicGuess`.
double valueBytes(Value v, int64_t dynamicGuess = 1) {
  auto shaped = dyn_cast<ShapedType>(v.getType());
  if (!shaped || !shaped.hasRank())
    return 0;
  double n = 1;
  for (int64_t d : shaped.getShape())
    n *= ShapedType::isDynamic(d) ? dynamicGuess : d;
  return n * elementBytes(shaped);
}

/// The problem shape a host planner's solve time depends on, in the
/// profile's host_planners field names (docs/profile-format.md).
std::map<std::string, int64_t> hostPlannerShape(Operation *op) {
  std::map<std::string, int64_t> shape;
  if (auto plan = dyn_cast<PlanPlacementOp>(op)) {
    // NetMoE: I samples on nodes x ranks per node, E experts -- what the
    // runtime solves (RuntimeCall<PlanPlacementOp> reads the same grid).
    auto [nodes, perNode] = nodeGridOf(op, plan.getGridAttr(), plan.getAxes());
    shape["samples"] = cast<ShapedType>(plan.getCounts().getType()).getDimSize(0);
    shape["nodes"] = nodes;
    shape["ranks_per_node"] = perNode;
    shape["experts"] = plan.getNumExperts();
  }
  return shape;
}

/// A host planner's task: its solve, measured (the profile's host_planners)
/// at its problem shape. No fallback: an unmeasured solve priced at 0 is
/// the "assumed hidden" the host stream is there to check.
FailureOr<TaskCost> hostPlannerCost(Operation *op,
                                    const HardwareProfile &profile) {
  std::map<std::string, int64_t> shape = hostPlannerShape(op);
  StringRef name = op->getName().getStringRef();
  if (std::optional<double> us = profile.hostPlannerUs(name, shape)) {
    TaskCost c;
    c.us = *us;
    return c;
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  for (auto [i, field] : llvm::enumerate(shape))
    os << (i ? ", " : "") << "\"" << field.first << "\": " << field.second;
  return op->emitOpError()
         << "is a host planner with no measured solve time in profile '"
         << profile.name << "': add {" << text
         << ", \"us\": <time>} to host_planners.\"" << name
         << "\" (moe-trace time-solve measures NetMoE's solve; "
            "docs/profile-format.md)";
}

double dim(Value v, unsigned i) {
  return cast<ShapedType>(v.getType()).getDimSize(i);
}

/// Tokens of a B x N x ... activation.
/// `v`, or for a vjp body's argument the primal bound to it.
Value throughVjp(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    if (auto vjp = dyn_cast<VjpOp>(arg.getOwner()->getParentOp()))
      return vjp.getPrimals()[arg.getArgNumber()];
  return v;
}

} // namespace

int64_t mlir::moe::tokenParts(Operation *op) {
  if (auto vjp = dyn_cast<VjpOp>(op))
    op = vjp.getForwardOp();
  if (std::optional<RoutingShape> shape = routingShape(op))
    return shape->parts;
  if (auto e = dyn_cast<ExpertOp>(op); e && e.getRows()) {
    Operation *def = throughVjp(e.getRows()).getDefiningOp();
    if (auto w = dyn_cast_or_null<RowsWindowOp>(def))
      return w.getPart()[1];
    if (def)
      return tokenParts(def);
  }
  return 1;
}

namespace {

/// A variable-count expert's rows per local expert at the expected load:
/// the dispatch's T·k rows per rank spread evenly over the E experts, G·T·k
/// / E = T·k / E_l; the bound R when the dispatch is out of sight.
double expectedRows(ExpertOp e) {
  auto in = cast<ShapedType>(e.getInput().getType());
  Value rows = throughVjp(e.getRows());
  if (auto w = rows.getDefiningOp<RowsWindowOp>())
    rows = w.getInputRows().front();
  // Expert sharding: the node's S ranks' rows, gathered.
  double shards = 1;
  if (auto gather = rows.getDefiningOp<GatherRowsOp>()) {
    shards = static_cast<double>(dim(gather.getGatheredRows(), 1)) /
             dim(gather.getRows(), 1);
    rows = gather.getRows();
  }
  auto dispatch = rows.getDefiningOp<DispatchOp>();
  if (!dispatch)
    return in.getDimSize(1);
  auto indices = cast<ShapedType>(dispatch.getIndices().getType());
  // A token chunk computes its part of every expert's rows.
  return shards * static_cast<double>(indices.getNumElements()) /
         in.getDimSize(0) / tokenParts(e);
}

double tokens(Value v) {
  auto shaped = cast<ShapedType>(v.getType());
  double t = 1;
  for (int64_t i = 0; i + 1 < shaped.getRank(); ++i)
    t *= shaped.getDimSize(i);
  return t;
}

double memoryTraffic(Operation *op) {
  double bytes = 0;
  for (Value v : op->getOperands())
    bytes += valueBytes(v);
  for (Value v : op->getResults())
    bytes += valueBytes(v);
  return bytes;
}

bool isStatic(Operation *op) {
  auto isStaticValue = [](Value v) {
    auto shaped = dyn_cast<ShapedType>(v.getType());
    return !shaped || shaped.hasStaticShape();
  };
  return llvm::all_of(op->getOperands(), isStaticValue) &&
         llvm::all_of(op->getResults(), isStaticValue);
}

} // namespace

FailureOr<std::pair<int64_t, int64_t>>
CostModel::groupShape(Operation *op, FlatSymbolRefAttr grid,
                      ArrayRef<int16_t> axes) {
  FailureOr<shard::GridOp> gridOp = lookupGrid(op, grid, symbols);
  if (failed(gridOp))
    return failure();
  FailureOr<int64_t> size = verifyGroupSize(op, *gridOp, axes);
  if (failed(size))
    return failure();
  ArrayRef<int64_t> shape = gridOp->getShape();
  int64_t perNode;
  if (shape.size() >= 2) {
    // Axis 0 is nodes: the group's ranks on one node are the product of
    // its other axes.
    perNode = 1;
    for (int16_t a : axes)
      if (a != 0)
        perNode *= shape[a];
  } else {
    perNode = std::min<int64_t>(*size, profile.gpusPerNode);
  }
  return std::make_pair(*size, perNode);
}

bool CostModel::exchangesBothWays(Operation *op, Operation *forward) {
  auto combine = dyn_cast<CombineOp>(forward);
  return op != forward && combine && combine.getRows() &&
         !combine.getPlacement();
}

FailureOr<TaskCost> CostModel::collectiveCost(Operation *op,
                                              Operation *forward) {
  auto collective = cast<CollectiveOpInterface>(forward);
  auto group = groupShape(op, collective.getGridAttr(), collective.getAxes());
  if (failed(group))
    return failure();
  auto [size, perNode] = *group;
  TaskCost c;
  c.communication = true;
  CollectiveKind kind = CollectiveKind::AllToAll;
  if (auto ar = dyn_cast<AllReduceOp>(forward)) {
    kind = CollectiveKind::AllReduce;
    if (std::optional<ArrayRef<int64_t>> range = ar.getBytes())
      c.bytes = (*range)[1];
    else
      for (Value v : ar.getInputs())
        c.bytes += valueBytes(v);
  } else if (isa<RoutingCountsOp, ExchangeCountsOp>(forward)) {
    // Routing statistics: the gathered (G B) x E counts; a layer's one
    // counts exchange: G x E (moved as 4-byte floats, the size of the i32
    // result).
    kind = CollectiveKind::AllGather;
    c.bytes = valueBytes(forward->getResult(0));
  } else if (auto move = dyn_cast<MoveSamplesOp>(forward)) {
    // What follows a sample (labels): an all-gather of the group's.
    kind = CollectiveKind::AllGather;
    c.bytes = valueBytes(move.getInput()) * size;
  } else {
    if (routing)
      return tracedExchange(op, forward, size, perNode);
    // The bytes each rank sends: every slot of the send buffer, E x C x M
    // for dispatch and the same back for combine; dropless sends its k
    // copies of every token.
    std::optional<RoutingShape> shape = routingShape(forward);
    if (!shape)
      return op->emitOpError() << "has no cost model";
    int64_t experts = shape->experts;
    // A token chunk moves only its window of the slots.
    std::optional<int64_t> capacity = shape->slotCount;
    // Dispatch moves its input's tokens; combine brings them back.
    Value tokensSide, expertSide;
    if (auto d = dyn_cast<DispatchOp>(forward)) {
      tokensSide = d.getInput();
      expertSide = d.getResult();
    } else {
      auto cmb = cast<CombineOp>(forward);
      tokensSide = cmb.getResult();
      expertSide = cmb.getInput();
    }
    double m = dim(tokensSide, 2) * elementBytes(tokensSide.getType());
    if (capacity) {
      c.bytes = static_cast<double>(experts) * *capacity * m;
    } else {
      auto indices = forward->getOperand(1);
      double k = cast<ShapedType>(indices.getType()).getRank() == 3
                     ? dim(indices, 2)
                     : 1;
      // A token chunk moves its part of the routed rows.
      c.bytes = tokens(tokensSide) * k * m / shape->parts;
    }
    // Both ways in one exchange: each rank sends its rows of either
    // direction (the expected loads are the same both ways).
    if (exchangesBothWays(op, forward))
      c.bytes *= 2;
  }
  c.us = collectiveUs(profile, kind, c.bytes * workScale, size, perNode);
  c.link = collectiveLink(size, perNode);
  c.us += profile.launchUs;
  return c;
}

FailureOr<TaskCost> CostModel::forwardCost(Operation *op) {
  TaskCost c;
  auto gemm = [&](double flops) {
    c.flops = flops;
    c.us = profile.gemm.time(flops * workScale);
  };
  if (!isStatic(op) && !isa<ExpertOp>(op))
    return op->emitOpError() << "has dynamic shapes the cost model cannot "
                                "time";
  if (auto a = dyn_cast<AttentionOp>(op)) {
    Value x = a.getInput();
    gemm(attentionFlops(dim(x, 0), dim(x, 1), dim(x, 2), a.getNumHeads(),
                        a.getNumKvHeads(), a.getHeadDim()));
    // Pre-norm and softmax are memory-bound passes over the activation.
    c.bytes = attentionMemoryBytes(valueBytes(x));
    c.us += profile.memory.time(c.bytes * workScale) - profile.memory.alphaUs;
  } else if (auto g = dyn_cast<GateOp>(op)) {
    double t = tokens(g.getInput()), m = dim(g.getInput(), 2);
    Value aux = g.getAuxWeight();
    gemm(gateFlops(t, m, g.getNumExperts(), aux ? dim(aux, 1) : 0));
  } else if (auto e = dyn_cast<ExpertOp>(op)) {
    auto in = cast<ShapedType>(e.getInput().getType());
    double slots = e.getRows() ? expectedRows(e) : in.getDimSize(1);
    if (ShapedType::isDynamic(in.getDimSize(1)))
      return op->emitOpError() << "has a dropless (dynamic) slot count the "
                                  "static cost model cannot time";
    gemm(expertFlops(in.getDimSize(0), slots, in.getDimSize(2),
                     e.getHiddenSize(), e.isGated() ? 3 : 2));
  } else if (auto s = dyn_cast<SharedExpertOp>(op)) {
    double gemms = s.getGateProj() ? 3 : 2;
    gemm(2 * tokens(s.getInput()) * dim(s.getUp(), 0) * dim(s.getUp(), 1) *
         gemms);
  } else if (auto l = dyn_cast<LinearOp>(op)) {
    gemm(2 * tokens(l.getInput()) * dim(l.getWeight(), 0) *
         dim(l.getWeight(), 1));
  } else if (auto w = dyn_cast<RowsWindowOp>(op)) {
    // A copy of the window's rows at the expected load (the buffers are
    // sized for the bound): read and written once.
    auto dispatch = w.getInputRows().front().getDefiningOp<DispatchOp>();
    double rows = dispatch ? static_cast<double>(cast<ShapedType>(
                                 dispatch.getIndices().getType())
                                 .getNumElements()) /
                                 w.getPart()[1]
                           : dim(w.getResult(), 0) * dim(w.getResult(), 1);
    c.bytes = 2 * rows * dim(w.getResult(), 2) *
              elementBytes(w.getResult().getType());
    c.us = profile.memory.time(c.bytes * workScale);
  } else if (op->hasTrait<OpTrait::ConstantLike>()) {
    return c; // folded into the binary, no work
  } else {
    // Norms, residual adds, embeddings, the loss, splits, merges, updates:
    // memory-bound.
    c.bytes = memoryTraffic(op);
    c.us = profile.memory.time(c.bytes * workScale);
  }
  return c;
}

FailureOr<TaskCost> CostModel::cost(Operation *op) {
  Operation *forward = op;
  bool backward = false;
  if (auto vjp = dyn_cast<VjpOp>(op)) {
    forward = vjp.getForwardOp();
    backward = true;
  }
  if (isHostPlanner(forward))
    return hostPlannerCost(forward, profile);
  if (isa<GatherRowsOp, ScatterRowsOp>(forward))
    return shardRowsCost(op, forward);
  // Expert sharding's shard collectives are priced below, as nccl-tests
  // sizes them.
  if (isa<CollectiveOpInterface>(forward) &&
      !isa<shard::AllGatherOp, shard::ReduceScatterOp>(forward)) {
    FailureOr<TaskCost> c = collectiveCost(op, forward);
    // The padded combine's vjp (moe_rt_combine_grad) and the placing one
    // exchange twice: the expert outputs come to the tokens again, for the
    // gate weights' gradient, then the gradient goes to the experts -- two
    // all-to-alls of the forward's size. The variable-count one moves both
    // in one all-to-all-v (collectiveCost prices it).
    if (succeeded(c) && backward && isa<CombineOp>(forward) &&
        !exchangesBothWays(op, forward)) {
      c->us *= 2;
      c->bytes *= 2;
    }
    // A variable-count dispatch all-gathers every rank's E counts before
    // its all-to-all-v, forward and vjp alike (docs/variable-dropless.md),
    // unless it reads its layer's one exchange (`all_counts`), which is
    // charged once, as its own op.
    auto dispatch = dyn_cast<DispatchOp>(forward);
    if (succeeded(c) && dispatch && dispatch.isVariable() &&
        !dispatch.getAllCounts()) {
      auto group = groupShape(op, dispatch.getGridAttr(), dispatch.getAxes());
      if (failed(group))
        return failure();
      double countsBytes = 4.0 * dispatch.getNumExperts() * group->first;
      c->us += collectiveUs(profile, CollectiveKind::AllGather,
                            countsBytes * workScale, group->first,
                            group->second);
    }
    return c;
  }
  if (isa<shard::AllGatherOp, shard::ReduceScatterOp>(forward)) {
    auto group = groupShape(
        op, forward->getAttrOfType<FlatSymbolRefAttr>("grid"),
        forward->getAttrOfType<DenseI16ArrayAttr>("grid_axes").asArrayRef());
    if (failed(group))
      return failure();
    TaskCost c;
    c.communication = true;
    // The whole tensor on each rank: an all-gather's result, a
    // reduce-scatter's operand (nccl-tests' size; FSMoE's n_ag = n_rs).
    bool gather = isa<shard::AllGatherOp>(forward);
    c.bytes = valueBytes(gather ? forward->getResult(0)
                                : forward->getOperand(0));
    c.us = collectiveUs(profile,
                        gather ? CollectiveKind::AllGather
                               : CollectiveKind::ReduceScatter,
                        c.bytes * workScale, group->first, group->second) +
           profile.launchUs;
    c.link = collectiveLink(group->first, group->second);
    return c;
  }
  auto expert = dyn_cast<ExpertOp>(forward);
  FailureOr<TaskCost> c = routing && expert ? tracedExperts(op, expert)
                                            : forwardCost(forward);
  if (failed(c))
    return failure();
  if (op->hasTrait<OpTrait::ConstantLike>())
    return c;
  if (backward) {
    c->us *= profile.backwardFactor;
    c->flops *= profile.backwardFactor;
  }
  // The runtime's kernel for this class against the GEMM / memory rates
  // (measured; 1 when the profile does not say).
  c->us *= profile.opScaleOf(target::profileOpClass(op));
  c->us += profile.launchUs;
  return c;
}

FailureOr<ChunkedCost> CostModel::chunkedCost(Operation *op) {
  FailureOr<TaskCost> whole = cost(op);
  if (failed(whole))
    return failure();
  workScale = 0;
  FailureOr<TaskCost> empty = cost(op);
  workScale = 1;
  if (failed(empty))
    return failure();
  return ChunkedCost{empty->us, whole->us - empty->us};
}
