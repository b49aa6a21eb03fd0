//===- PrintSchedule.cpp - per-stream task order of a step ----------------===//

#include "moe/Analysis/StreamOrder.h"
#include "moe/Analysis/Tasks.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEPRINTSCHEDULE
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
struct PrintSchedulePass
    : public moe::impl::MoePrintScheduleBase<PrintSchedulePass> {
  using MoePrintScheduleBase::MoePrintScheduleBase;

  void print(raw_ostream &os, FunctionOpInterface func,
             const StreamOrder &order) {
    os << "schedule @" << func.getName() << " policy "
       << func->getAttrOfType<StringAttr>(MoeDialect::getScheduleAttrName())
              .getValue()
       << "\n";
    for (Phase phase : {Phase::fwd, Phase::bwd})
      for (unsigned s = 0; s < order.numStreams(); ++s) {
        StreamAttr stream = order.streamAttr(s);
        os << "  " << stringifyPhase(phase) << " "
           << stringifyStreamKind(stream.getKind());
        if (stream.getIndex())
          os << stream.getIndex();
        os << ":";
        std::string previous;
        for (Operation *op : order.opsOn(s)) {
          TaskAttr task = getTask(op);
          if (!task || task.getPhase() != phase || task.getLabel() == previous)
            continue;
          previous = task.getLabel();
          os << " " << previous;
        }
        os << "\n";
      }
  }

  void runOnOperation() override {
    std::string error;
    auto file = openOutputFile(output, &error);
    if (!file) {
      mlir::emitError(getOperation().getLoc())
          << "moe-print-schedule: " << error;
      return signalPassFailure();
    }
    for (auto func : getOperation().getOps<FunctionOpInterface>()) {
      if (!func->hasAttr(MoeDialect::getScheduleAttrName()))
        continue;
      FailureOr<StreamOrder> order = StreamOrder::build(func, false);
      if (failed(order))
        return signalPassFailure();
      print(file->os(), func, *order);
    }
    file->keep();
    markAllAnalysesPreserved();
  }
};
} // namespace
