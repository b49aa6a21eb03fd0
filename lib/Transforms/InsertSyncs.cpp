//===- InsertSyncs.cpp - explicit, minimal cross-stream events ------------===//
//
// A stream runs its ops in program order, so the only dependencies that need
// an event are those between streams. Vector clocks (one entry per stream,
// advanced by waits) tell whether an earlier wait — direct or through
// another stream's wait — already orders a producer before a consumer, so no
// wait is inserted that stream order or another wait implies.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/ScheduleVerifier.h"
#include "moe/Analysis/StreamOrder.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEINSERTSYNCS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

struct InsertSyncsPass
    : public moe::impl::MoeInsertSyncsBase<InsertSyncsPass> {

  LogicalResult insertSyncs(FunctionOpInterface func) {
    Block &entry = func.getFunctionBody().front();
    // Stream ids.
    SmallVector<StreamAttr> streams;
    auto idOf = [&](StreamAttr s) -> int {
      auto it = llvm::find(streams, s);
      if (it != streams.end())
        return it - streams.begin();
      streams.push_back(s);
      return streams.size() - 1;
    };
    for (Operation &op : entry)
      if (StreamAttr s = StreamOrder::getStream(&op))
        idOf(s);
    unsigned width = streams.size();
    using Clock = SmallVector<int64_t, 4>;
    SmallVector<Clock> current(width, Clock(width, 0));
    // Per producer op: its stream, position and clock when it was issued.
    struct Issued {
      int stream;
      int64_t position;
      Clock clock;
      Value event; // recorded right after the op, once needed
    };
    DenseMap<Operation *, Issued> issued;
    DenseMap<Value, Clock> eventClocks;
    OpBuilder builder(&getContext());

    for (Operation &op : llvm::make_early_inc_range(entry)) {
      StreamAttr stream = StreamOrder::getStream(&op);
      if (!stream) {
        if (!StreamOrder::isHostOp(&op))
          return op.emitOpError() << "is not on a stream; run moe-schedule "
                                     "before moe-insert-syncs";
        continue;
      }
      int s = idOf(stream);
      if (auto record = dyn_cast<RecordEventOp>(&op)) {
        eventClocks[record.getEvent()] = current[s];
        continue;
      }
      if (auto wait = dyn_cast<WaitEventOp>(&op)) {
        auto it = eventClocks.find(wait.getEvent());
        if (it == eventClocks.end())
          return wait.emitOpError() << "waits on an event not recorded "
                                       "before it";
        for (unsigned k = 0; k < width; ++k)
          current[s][k] = std::max(current[s][k], it->second[k]);
        continue;
      }
      // The latest producer per other stream that this op needs.
      SmallVector<Operation *> needed(width, nullptr);
      op.walk([&](Operation *nested) {
        for (Value v : nested->getOperands()) {
          Operation *def = v.getDefiningOp();
          auto it = def ? issued.find(def) : issued.end();
          if (it == issued.end() || it->second.stream == s)
            continue;
          Operation *&slot = needed[it->second.stream];
          if (!slot || issued[slot].position < it->second.position)
            slot = def;
        }
      });
      for (unsigned p = 0; p < width; ++p) {
        Operation *producer = needed[p];
        if (!producer)
          continue;
        Issued &info = issued[producer];
        if (current[s][p] >= info.position)
          continue; // already ordered by stream order or an earlier wait
        if (!info.event) {
          builder.setInsertionPointAfter(producer);
          info.event = RecordEventOp::create(builder, producer->getLoc(),
                                             streams[p])
                           .getEvent();
        }
        builder.setInsertionPoint(&op);
        WaitEventOp::create(builder, op.getLoc(), info.event, stream);
        for (unsigned k = 0; k < width; ++k)
          current[s][k] = std::max(current[s][k], info.clock[k]);
      }
      ++current[s][s];
      issued[&op] = {s, current[s][s], current[s], Value()};
    }
    return success();
  }

  void runOnOperation() override {
    bool any = false;
    for (auto func : getOperation().getOps<FunctionOpInterface>()) {
      if (!func->hasAttr(MoeDialect::getScheduleAttrName()))
        continue;
      any = true;
      if (failed(insertSyncs(func)))
        return signalPassFailure();
#ifndef NDEBUG
      // The result must pass the schedule verifier (debug builds).
      if (failed(verifySchedule(func)))
        return signalPassFailure();
#endif
    }
    if (!any) {
      getOperation().emitError()
          << "moe-insert-syncs: no scheduled step (run moe-schedule first)";
      return signalPassFailure();
    }
  }
};
} // namespace
