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

LogicalResult mlir::moe::insertSyncs(FunctionOpInterface func) {
  Block &entry = func.getFunctionBody().front();
  // Queues (StreamOrder's model): one per compute stream, two per
  // communication stream (all-reduce chunks apart from all-to-alls).
  SmallVector<std::pair<StreamAttr, bool>> queues;
  auto queueOf = [&](Operation *op) -> int {
    std::pair<StreamAttr, bool> key{StreamOrder::getStream(op),
                                    StreamOrder::isLowPriority(op)};
    auto it = llvm::find(queues, key);
    if (it != queues.end())
      return it - queues.begin();
    queues.push_back(key);
    return queues.size() - 1;
  };
  for (Operation &op : entry)
    if (StreamOrder::getStream(&op) && !isa<RecordEventOp, WaitEventOp>(op))
      queueOf(&op);
  unsigned width = queues.size();
  using Clock = SmallVector<int64_t, 4>;
  SmallVector<Clock> current(width, Clock(width, 0));
  // Per task: its queue, position and clock when it was issued, and the
  // event recorded right after it once one is needed.
  struct Issued {
    int queue;
    int64_t position;
    Clock clock;
    Value event;
  };
  DenseMap<Operation *, Issued> issued;
  DenseMap<Value, Clock> eventClocks;
  DenseMap<Operation *, Operation *> anchors = StreamOrder::eventAnchors(entry);
  OpBuilder builder(func->getContext());

  for (Operation &op : llvm::make_early_inc_range(entry)) {
    StreamAttr stream = StreamOrder::getStream(&op);
    if (!stream) {
      if (!StreamOrder::isHostOp(&op))
        return op.emitOpError() << "is not on a stream; run moe-schedule "
                                   "before moe-insert-syncs";
      continue;
    }
    if (auto record = dyn_cast<RecordEventOp>(&op)) {
      Operation *producer = anchors.lookup(&op);
      eventClocks[record.getEvent()] =
          producer ? issued[producer].clock : Clock(width, 0);
      continue;
    }
    if (auto wait = dyn_cast<WaitEventOp>(&op)) {
      auto it = eventClocks.find(wait.getEvent());
      if (it == eventClocks.end())
        return wait.emitOpError() << "waits on an event not recorded "
                                     "before it";
      if (Operation *target = anchors.lookup(&op)) {
        int q = queueOf(target);
        for (unsigned k = 0; k < width; ++k)
          current[q][k] = std::max(current[q][k], it->second[k]);
      }
      continue;
    }
    int q = queueOf(&op);
    // The latest producer per other queue that this op needs.
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
      for (unsigned k = 0; k < width; ++k)
        current[q][k] = std::max(current[q][k], info.clock[k]);
    }
    ++current[q][q];
    issued[&op] = {q, current[q][q], current[q], Value()};
  }
  return success();
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
