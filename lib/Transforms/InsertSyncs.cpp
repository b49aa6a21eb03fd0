//===- InsertSyncs.cpp - explicit, minimal cross-stream events ------------===//
//
// A queue runs its ops in program order (StreamOrder.h: one queue per
// compute stream, two per communication stream), so the only dependencies
// that need an event are those between queues. Vector clocks (one entry per
// queue, advanced by waits) tell whether an earlier wait — direct or through
// another queue's wait — already orders a producer before a consumer, so no
// wait is inserted that queue order or another wait implies.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/ScheduleVerifier.h"
#include "moe/Analysis/StreamOrder.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEINSERTSYNCS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// One pass over a step's entry block in program order, keeping a vector
/// clock per queue (StreamOrder's model: one per compute stream, two per
/// communication stream, all-reduce chunks apart from all-to-alls).
class SyncInserter {
public:
  explicit SyncInserter(Block &entry)
      : entry(entry), anchors(StreamOrder::eventAnchors(entry)),
        builder(entry.getParentOp()->getContext()) {
    for (Operation &op : entry)
      if (StreamOrder::getStream(&op) && !isa<RecordEventOp, WaitEventOp>(op))
        queueOf(&op);
    width = queues.size();
    current.assign(width, Clock(width, 0));
  }

  LogicalResult run() {
    for (Operation &op : llvm::make_early_inc_range(entry)) {
      if (!StreamOrder::getStream(&op)) {
        if (!StreamOrder::isHostOp(&op))
          return op.emitOpError() << "is not on a stream; run moe-schedule "
                                     "before moe-insert-syncs";
        continue;
      }
      if (auto record = dyn_cast<RecordEventOp>(&op))
        noteRecord(record);
      else if (auto wait = dyn_cast<WaitEventOp>(&op)) {
        if (failed(noteWait(wait)))
          return failure();
      } else if (failed(issue(op))) {
        return failure();
      }
    }
    return success();
  }

private:
  using Clock = SmallVector<int64_t, 4>;
  /// Per task: its queue, position and clock when it was issued, and the
  /// event recorded right after it once one is needed.
  struct Issued {
    int queue;
    int64_t position;
    Clock clock;
    Value event;
  };

  int queueOf(Operation *op) {
    std::pair<StreamAttr, bool> key{StreamOrder::getStream(op),
                                    StreamOrder::isLowPriority(op)};
    auto it = llvm::find(queues, key);
    if (it != queues.end())
      return it - queues.begin();
    queues.push_back(key);
    return queues.size() - 1;
  }

  /// Raises queue q's clock to at least `clock`.
  void advanceTo(int q, const Clock &clock) {
    for (unsigned k = 0; k < width; ++k)
      current[q][k] = std::max(current[q][k], clock[k]);
  }

  /// An event already in the step: it carries its producer's clock.
  void noteRecord(RecordEventOp record) {
    Operation *producer = anchors.lookup(record);
    eventClocks[record.getEvent()] =
        producer ? issued[producer].clock : Clock(width, 0);
  }

  /// A wait already in the step orders its target's queue after the event.
  LogicalResult noteWait(WaitEventOp wait) {
    auto it = eventClocks.find(wait.getEvent());
    if (it == eventClocks.end())
      return wait.emitOpError() << "waits on an event not recorded "
                                   "before it";
    if (Operation *target = anchors.lookup(wait))
      advanceTo(queueOf(target), it->second);
    return success();
  }

  /// The latest producer per other queue that `op` (queue q) reads.
  SmallVector<Operation *> neededProducers(Operation &op, int q) {
    SmallVector<Operation *> needed(width, nullptr);
    op.walk([&](Operation *nested) {
      for (Value v : nested->getOperands()) {
        Operation *def = v.getDefiningOp();
        auto it = def ? issued.find(def) : issued.end();
        if (it == issued.end() || it->second.queue == q)
          continue;
        Operation *&slot = needed[it->second.queue];
        if (!slot || issued[slot].position < it->second.position)
          slot = def;
      }
    });
    return needed;
  }

  /// A task: a wait before it for each producer in another queue that no
  /// earlier wait orders it after (the producer's event recorded once).
  LogicalResult issue(Operation &op) {
    StreamAttr stream = StreamOrder::getStream(&op);
    int q = queueOf(&op);
    SmallVector<Operation *> needed = neededProducers(op, q);
    for (unsigned p = 0; p < width; ++p) {
      Operation *producer = needed[p];
      if (!producer)
        continue;
      Issued &info = issued[producer];
      if (current[q][p] >= info.position)
        continue; // already ordered by an earlier wait
      if (queues[p].first == stream)
        return op.emitOpError()
               << "depends on " << producer->getName()
               << " in the other queue of the same communication stream; "
                  "the priority pool cannot order them";
      if (!info.event) {
        builder.setInsertionPointAfter(producer);
        info.event =
            RecordEventOp::create(builder, producer->getLoc(), queues[p].first)
                .getEvent();
      }
      builder.setInsertionPoint(&op);
      WaitEventOp::create(builder, op.getLoc(), info.event, stream);
      advanceTo(q, info.clock);
    }
    ++current[q][q];
    issued[&op] = {q, current[q][q], current[q], Value()};
    return success();
  }

  Block &entry;
  SmallVector<std::pair<StreamAttr, bool>> queues;
  unsigned width = 0;
  SmallVector<Clock> current;
  DenseMap<Operation *, Issued> issued;
  DenseMap<Value, Clock> eventClocks;
  DenseMap<Operation *, Operation *> anchors;
  OpBuilder builder;
};

} // namespace

LogicalResult mlir::moe::insertSyncs(FunctionOpInterface func) {
  return SyncInserter(func.getFunctionBody().front()).run();
}

namespace {

struct InsertSyncsPass : public moe::impl::MoeInsertSyncsBase<InsertSyncsPass> {
  void runOnOperation() override {
    auto steps = functionsWith(
        getOperation(), MoeDialect::getScheduleAttrName(), "moe-insert-syncs",
        "no scheduled step (run moe-schedule first)");
    if (failed(steps))
      return signalPassFailure();
    for (FunctionOpInterface func : *steps) {
      if (failed(insertSyncs(func)))
        return signalPassFailure();
#ifndef NDEBUG
      // The result must pass the schedule verifier (debug builds).
      if (failed(verifySchedule(func)))
        return signalPassFailure();
#endif
    }
  }
};
} // namespace
