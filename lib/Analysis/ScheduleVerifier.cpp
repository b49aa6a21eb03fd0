//===- ScheduleVerifier.cpp - is a scheduled step safe to run? ------------===//

#include "moe/Analysis/ScheduleVerifier.h"
#include "moe/Analysis/GradientGroups.h"
#include "moe/Analysis/StreamOrder.h"
#include "moe/Analysis/Tasks.h"

#include "llvm/ADT/MapVector.h"

using namespace mlir;
using namespace mlir::moe;

static std::string describe(Operation *op, const StreamOrder &order) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "'" << op->getName() << "'";
  if (auto task = op->getAttrOfType<TaskAttr>(MoeDialect::getTaskAttrName()))
    os << " (" << task.getLabel() << ")";
  int s = order.streamOf(op);
  if (s >= 0)
    os << " on " << order.streamAttr(s);
  return text;
}

/// The op that computed the gradient a slice reduces: through the earlier
/// slices of the same tensor to the producer.
static Operation *gradientProducer(Value v) {
  Operation *def = v.getDefiningOp();
  while (auto slice = dyn_cast_or_null<AllReduceOp>(def)) {
    unsigned i = cast<OpResult>(v).getResultNumber();
    v = slice.getInputs()[i];
    def = v.getDefiningOp();
  }
  return def;
}

static LogicalResult verifySliceCausality(Operation *op,
                                          const StreamOrder &order) {
  auto window = op->getAttrOfType<TaskAttr>(MoeDialect::getGradientWindowAttrName());
  if (!window)
    return success();
  auto slice = dyn_cast<AllReduceOp>(op);
  if (!slice)
    return op->emitOpError() << "carries " << MoeDialect::getGradientWindowAttrName()
                             << " but is not a gradient all-reduce";
  for (auto [i, input] : llvm::enumerate(slice.getInputs())) {
    Operation *producer = gradientProducer(input);
    TaskAttr made = producer ? getTask(producer) : TaskAttr();
    if (!producer || (made && backwardPosition(made) < backwardPosition(window)))
      continue;
    InFlightDiagnostic diag =
        op->emitOpError()
        << "is a gradient slice " << describe(op, order)
        << " reduced in the window of " << window.getLabel()
        << ", before the gradient it covers (operand #" << i
        << ") exists: it is produced by " << describe(producer, order);
    diag.attachNote(producer->getLoc())
        << "producer: " << describe(producer, order);
    return failure();
  }
  return success();
}

/// A host stream's join (docs/host-planners.md): an event recorded there
/// completes with the planner before it; one recorded before any planner
/// ran on the stream joins nothing, and a stream waiting for it would read
/// a placement that is not solved yet.
static LogicalResult verifyHostJoins(Block &entry, const StreamOrder &order) {
  DenseMap<Operation *, Operation *> anchors = StreamOrder::eventAnchors(entry);
  for (Operation &op : entry) {
    auto record = dyn_cast<RecordEventOp>(op);
    if (!record || record.getStream().getKind() != StreamKind::host ||
        anchors.lookup(&op))
      continue;
    return record.emitOpError()
           << "joins " << record.getStream()
           << " before any host planner started on it: a stream waiting "
              "for this event would not wait for a solve (record the join "
              "after the planner whose result is read)";
  }
  return success();
}

/// Every all-reduce (and every slice of one) that a parameter's gradient
/// passes through on its way to the update runs over the parameter's group
/// (GradientGroups.h): replicated weights over the data-parallel ranks,
/// tensor-parallel shards over the nodes only, experts over none — so
/// slices planned into shared windows (moe-fsmoe-plan) keep their groups.
static LogicalResult verifyGradientGroups(FunctionOpInterface func) {
  auto model = func->getAttrOfType<ModelAttr>(MoeDialect::getModelAttrName());
  if (!model)
    return success();
  SymbolTableCollection table;
  FailureOr<shard::GridOp> grid = lookupGrid(func, model.getGrid(), table);
  if (failed(grid))
    return failure();
  ArrayRef<int64_t> shape = grid->getShape();
  Block &entry = func.getFunctionBody().front();
  for (Operation &op : entry) {
    Value param, grad;
    if (auto u = dyn_cast<SgdOp>(op))
      param = u.getParam(), grad = u.getGrad();
    else if (auto u = dyn_cast<AdamWOp>(op))
      param = u.getParam(), grad = u.getGrad();
    else if (auto u = dyn_cast<SgdMomentumOp>(op))
      param = u.getParam(), grad = u.getGrad();
    auto arg = dyn_cast_or_null<BlockArgument>(param);
    if (!arg || arg.getOwner() != &entry)
      continue;
    GradientGroups groups = gradientGroups(func, model, arg);
    SmallVector<int16_t> expected = nontrivialAxes(groups.reduce, shape);
    auto name = func.getArgAttrOfType<StringAttr>(
        arg.getArgNumber(), MoeDialect::getParamAttrName());
    auto culprit = [&](Operation *at) {
      InFlightDiagnostic diag = at->emitOpError();
      diag << "reduces the gradient of parameter #" << arg.getArgNumber();
      if (name)
        diag << " ('" << name.getValue() << "')";
      return diag;
    };
    bool reduced = false;
    for (Value v = grad; auto ar = v.getDefiningOp<AllReduceOp>();
         v = ar.getInputs()[cast<OpResult>(v).getResultNumber()]) {
      reduced = true;
      if (nontrivialAxes(ar.getAxes(), shape) != expected)
        return culprit(ar)
               << " over grid axes [" << ar.getAxes() << "], but "
               << (groups.expert      ? "an expert weight is local to its rank"
                   : groups.headShard ? "a head shard's replicas are on the "
                                        "nodes only"
                                      : "a replicated weight's replicas are "
                                        "on every data-parallel rank")
               << " (axes [" << groups.reduce << "])";
    }
    if (!reduced && !expected.empty())
      return op.emitOpError()
             << "updates parameter #" << arg.getArgNumber()
             << (name ? " ('" + name.getValue().str() + "')" : std::string())
             << " with a gradient never all-reduced over its replicas (axes ["
             << groups.reduce << "])";
  }
  return success();
}

/// The error for a cross-stream use `op` makes of `def`'s result without an
/// event ordering them, in the words of the edge it misses.
static void reportUnorderedUse(Operation &op, Operation *def, unsigned operand,
                               const StreamOrder &order) {
  InFlightDiagnostic diag = op.emitOpError();
  if (isHostPlanner(&op))
    diag << "is a host planner " << describe(&op, order)
         << " that starts before its input (operand #" << operand
         << ") exists: it is produced by " << describe(def, order)
         << "; record an event after the producer and wait for it on the "
            "host stream before the planner";
  else if (isHostPlanner(def))
    diag << "reads the result of host planner " << describe(def, order)
         << " before joining it: no event recorded on its host stream "
            "after the planner is waited for before this op";
  else if (isa<ExchangeCountsOp>(def))
    diag << "reads the counts of " << describe(def, order)
         << " (operand #" << operand
         << ") before that exchange completes: no event orders it before "
            "this op, whose exchange is sized by those counts";
  else
    diag << "uses a value produced by " << describe(def, order)
         << " without waiting for it (no event orders "
            "the producer before this op)";
  diag.attachNote(def->getLoc()) << "producer: " << describe(def, order);
}

LogicalResult mlir::moe::verifySchedule(FunctionOpInterface func) {
  FailureOr<StreamOrder> built = StreamOrder::build(func, true);
  if (failed(built))
    return failure();
  const StreamOrder &order = *built;
  Block &entry = func.getFunctionBody().front();

  if (failed(verifyHostJoins(entry, order)))
    return failure();

  // Data dependencies across streams; for a host planner these are its
  // start (after its inputs) and its join (before its result's first use).
  for (Operation &op : entry) {
    if (order.streamOf(&op) < 0)
      continue;
    WalkResult result = op.walk([&](Operation *nested) {
      for (OpOperand &use : nested->getOpOperands()) {
        Operation *def = use.get().getDefiningOp();
        if (!def || def->getBlock() != &entry || def == &op)
          continue;
        if (!order.happensBefore(def, &op)) {
          reportUnorderedUse(op, def, use.getOperandNumber(), order);
          return WalkResult::interrupt();
        }
      }
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      return failure();
  }

  // FSMoE §5 causality: a gradient slice planned into a backward window
  // reduces only gradients that exist before that window starts.
  for (Operation &op : entry)
    if (failed(verifySliceCausality(&op, order)))
      return failure();

  if (failed(verifyGradientGroups(func)))
    return failure();

  // Collectives of one group and class must be totally ordered: consecutive
  // ones in program order must be ordered by happens-before.
  struct GroupKey {
    Attribute grid;
    SmallVector<int16_t> axes;
    bool allReduce;
    bool operator<(const GroupKey &o) const {
      return std::tie(allReduce, axes) < std::tie(o.allReduce, o.axes) ||
             (std::tie(allReduce, axes) == std::tie(o.allReduce, o.axes) &&
              grid.getAsOpaquePointer() < o.grid.getAsOpaquePointer());
    }
  };
  std::map<GroupKey, Operation *> last;
  for (Operation &op : entry) {
    std::optional<CollectiveKey> key = getCollectiveKey(&op);
    if (!key)
      continue;
    GroupKey group{key->grid, key->axes, key->allReduceClass};
    auto [it, inserted] = last.try_emplace(group, &op);
    if (!inserted) {
      Operation *previous = it->second;
      if (!order.happensBefore(previous, &op)) {
        InFlightDiagnostic diag =
            op.emitOpError()
            << "is a collective on the same group as "
            << describe(previous, order)
            << " but nothing orders the two; ranks may issue them in "
               "different orders and deadlock";
        diag.attachNote(previous->getLoc())
            << "other collective: " << describe(previous, order);
        return failure();
      }
      it->second = &op;
    }
  }
  return success();
}
