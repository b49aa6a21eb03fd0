//===- MoeDialect.cpp - the moe dialect -----------------------------------===//

#include "moe/Dialect/Moe/MoeDialect.h"
#include "moe/Dialect/Moe/MoeOps.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace mlir::moe;

#include "moe/Dialect/Moe/MoeDialect.cpp.inc"

namespace {
/// Upstream shard.all_gather / shard.reduce_scatter (expert sharding's
/// collectives, docs/passes/moe-expert-sharding.md) are collectives of the
/// step like moe's own: a group of `grid_axes` of `grid`, which the
/// schedule, the verifier, the cost model and the runtime calls read
/// through this interface.
template <class OpT>
struct ShardCollective
    : public CollectiveOpInterface::ExternalModel<ShardCollective<OpT>, OpT> {
  FlatSymbolRefAttr getGridAttr(Operation *op) const {
    return cast<OpT>(op).getGridAttr();
  }
  ArrayRef<int16_t> getAxes(Operation *op) const {
    return cast<OpT>(op).getGridAxes();
  }
};
} // namespace

void MoeDialect::initialize() {
  registerAttributes();
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "moe/Dialect/Moe/MoeOps.cpp.inc"
      >();
  // The shard dialect is loaded first (a dependent dialect).
  MLIRContext *ctx = getContext();
  shard::AllGatherOp::attachInterface<ShardCollective<shard::AllGatherOp>>(
      *ctx);
  shard::ReduceScatterOp::attachInterface<
      ShardCollective<shard::ReduceScatterOp>>(*ctx);
}

template <class OpT> static mlir::moe::RoutingShape routingShapeOf(OpT op) {
  mlir::moe::RoutingShape shape;
  shape.experts = static_cast<int64_t>(op.getNumExperts());
  shape.capacity = op.getCapacity();
  shape.slotCount = shape.capacity;
  if (std::optional<ArrayRef<int64_t>> slots = op.getSlots();
      slots && slots->size() == 2) {
    shape.firstSlot = (*slots)[0];
    shape.slotCount = (*slots)[1];
  }
  return shape;
}

std::optional<mlir::moe::RoutingShape>
mlir::moe::routingShape(Operation *op) {
  if (auto d = dyn_cast<DispatchOp>(op))
    return routingShapeOf(d);
  if (auto c = dyn_cast<CombineOp>(op))
    return routingShapeOf(c);
  return std::nullopt;
}

/// A task may sit on a communication stream iff it communicates. Upstream
/// `shard` collectives (FSMoE's intra-node all-gather / reduce-scatter) count
/// as communication too.
bool mlir::moe::isCommunicationTask(Operation *op) {
  if (auto task = dyn_cast<TaskOpInterface>(op))
    return task.isCommunication();
  return isa<shard::AllGatherOp, shard::AllReduceOp, shard::AllToAllOp,
             shard::ReduceScatterOp, shard::BroadcastOp, shard::SendOp,
             shard::RecvOp, shard::ShiftOp>(op);
}

/// Anything that does work can be issued on a stream: moe tasks, upstream
/// collectives and plumbing such as residual adds (a kernel on the compute
/// stream). Structure (blocks, functions), terminators and the event ops,
/// which name their stream explicitly, cannot.
static bool isTask(Operation *op) {
  if (isa<TaskOpInterface>(op) || isCommunicationTask(op))
    return true;
  return op->getNumRegions() == 0 && !op->hasTrait<OpTrait::IsTerminator>() &&
         !isa<RecordEventOp, WaitEventOp>(op);
}

LogicalResult MoeDialect::verifyOperationAttribute(Operation *op,
                                                   NamedAttribute attr) {
  if (attr.getName() == getModelAttrName()) {
    auto model = dyn_cast<ModelAttr>(attr.getValue());
    if (!model)
      return op->emitError()
             << "'" << getModelAttrName() << "' must be a #moe.model attribute";
    if (!isa<FunctionOpInterface>(op))
      return op->emitError()
             << "'" << getModelAttrName() << "' belongs on a function";
    return verifyModel(op, model);
  }
  if (attr.getName() == getStreamAttrName()) {
    auto stream = dyn_cast<StreamAttr>(attr.getValue());
    if (!stream)
      return op->emitError() << "'" << getStreamAttrName()
                             << "' must be a #moe.stream attribute";
    if (!isTask(op))
      return op->emitError() << "only tasks (compute ops, plumbing and "
                                "collectives) can be put on a stream";
    bool comm = stream.getKind() == StreamKind::comm;
    if (comm != isCommunicationTask(op))
      return op->emitError()
             << (comm ? "a compute task cannot run on a communication stream"
                      : "a collective cannot run on a compute stream");
    return success();
  }
  if (attr.getName() == getTaskAttrName()) {
    if (!isa<TaskAttr>(attr.getValue()))
      return op->emitError()
             << "'" << getTaskAttrName() << "' must be a #moe.task attribute";
    return success();
  }
  if (attr.getName() == getScheduleAttrName()) {
    auto policy = dyn_cast<StringAttr>(attr.getValue());
    if (!policy || !isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << getScheduleAttrName()
                             << "' must be a policy name on a function";
    return success();
  }
  // Its fields are read (and checked) where the schedule is evaluated:
  // moe/Target/StepState.h, lrSchedule.
  if (attr.getName() == getLrScheduleAttrName()) {
    auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
    if (!dict || !dict.getAs<StringAttr>("kind") ||
        !isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << getLrScheduleAttrName()
                             << "' must be a dictionary with a kind on a "
                                "function";
    return success();
  }
  if (attr.getName() == getTokenDegreeAttrName()) {
    auto degrees = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!degrees || degrees.size() != 2 || degrees[0] < 1 || degrees[1] < 1 ||
        !isa<DispatchOp>(op))
      return op->emitError() << "'" << getTokenDegreeAttrName()
                             << "' must be [r_fwd, r_bwd] (both >= 1) on a "
                                "moe.dispatch";
    return success();
  }
  if (attr.getName() == getGradientWindowAttrName()) {
    auto window = dyn_cast<TaskAttr>(attr.getValue());
    if (!window || window.getPhase() != Phase::bwd || window.getBlock() < 0 ||
        (window.getKind() != TaskKind::E && window.getKind() != TaskKind::AT) ||
        !isa<AllReduceOp>(op))
      return op->emitError()
             << "'" << getGradientWindowAttrName()
             << "' must be a backward E or AT task of a block on a "
                "moe.all_reduce";
    return success();
  }
  return op->emitError() << "unknown moe dialect attribute '"
                         << attr.getName().getValue() << "'";
}

LogicalResult MoeDialect::verifyRegionArgAttribute(Operation *op,
                                                   unsigned regionIndex,
                                                   unsigned argIndex,
                                                   NamedAttribute attr) {
  if (attr.getName() == getParamAttrName()) {
    auto name = dyn_cast<StringAttr>(attr.getValue());
    if (!name || name.getValue().empty())
      return op->emitError() << "'" << getParamAttrName() << "' of argument #"
                             << argIndex << " must be a non-empty string";
    return success();
  }
  // Its fields are checked when the #moe.source is built (SourceAttr's
  // verifier); the tools' weight loader reads exactly them.
  if (attr.getName() == getSourceAttrName()) {
    if (!isa<SourceAttr>(attr.getValue()))
      return op->emitError() << "'" << getSourceAttrName() << "' of argument #"
                             << argIndex << " must be a #moe.source attribute";
    return success();
  }
  if (attr.getName() == getStateAttrName()) {
    auto name = dyn_cast<StringAttr>(attr.getValue());
    if (!name || name.getValue().empty())
      return op->emitError() << "'" << getStateAttrName() << "' of argument #"
                             << argIndex << " must be a non-empty string";
    return success();
  }
  if (attr.getName() == getStepInputAttrName()) {
    auto name = dyn_cast<StringAttr>(attr.getValue());
    // expert_slots.<block>: a block's expert placement
    // (moe_rt/expert_placement.h's slotsInputName).
    StringRef slots = name ? name.getValue() : StringRef();
    unsigned block;
    bool placement = slots.consume_front("expert_slots.") && !slots.empty() &&
                     !slots.getAsInteger(10, block);
    if (!name || (name.getValue() != "lr" && name.getValue() != "step" &&
                  !placement))
      return op->emitError()
             << "'" << getStepInputAttrName() << "' of argument #" << argIndex
             << " must be \"lr\", \"step\" or "
                "\"expert_slots.<block>\"";
    return success();
  }
  if (attr.getName() == getHiddenShardAttrName() ||
      attr.getName() == getHeadShardAttrName()) {
    auto shard = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!shard || shard.size() != 2 || shard[0] < 0 || shard[1] < 1)
      return op->emitError() << "'" << attr.getName().getValue()
                             << "' of argument #" << argIndex
                             << " must be [dim, shards] with shards >= 1";
    return success();
  }
  return op->emitError() << "unknown moe dialect argument attribute '"
                         << attr.getName().getValue() << "'";
}
