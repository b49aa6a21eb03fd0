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
    StringRef policy =
        func->getAttrOfType<StringAttr>(MoeDialect::getScheduleAttrName())
            .getValue();
    os << "schedule @" << func.getName() << " policy " << policy << "\n";
    // FSMoE's three resources (compute, the inter-node link of <comm>, the
    // intra-node link of <comm, 1>) are listed even when one is idle.
    bool fsmoe = policy == "fsmoe";
    SmallVector<StreamAttr> streams;
    if (fsmoe)
      streams = {StreamAttr::get(func.getContext(), StreamKind::compute, 0),
                 StreamAttr::get(func.getContext(), StreamKind::comm, 0),
                 StreamAttr::get(func.getContext(), StreamKind::comm, 1)};
    for (unsigned s = 0; s < order.numStreams(); ++s)
      if (!llvm::is_contained(streams, order.streamAttr(s)))
        streams.push_back(order.streamAttr(s));
    for (Phase phase : {Phase::fwd, Phase::bwd})
      for (StreamAttr stream : streams) {
        os << "  " << stringifyPhase(phase) << " "
           << stringifyStreamKind(stream.getKind());
        if (stream.getIndex())
          os << stream.getIndex();
        if (fsmoe && stream.getKind() == StreamKind::comm &&
            stream.getIndex() <= 1)
          os << (stream.getIndex() ? " (intra-node)" : " (inter-node)");
        os << ":";
        std::string previous;
        for (Operation *op : opsOn(order, stream)) {
          TaskAttr task = getTask(op);
          if (!task || task.getPhase() != phase || task.getLabel() == previous)
            continue;
          previous = task.getLabel();
          os << " " << previous;
        }
        os << "\n";
      }
  }

  static ArrayRef<Operation *> opsOn(const StreamOrder &order,
                                     StreamAttr stream) {
    for (unsigned s = 0; s < order.numStreams(); ++s)
      if (order.streamAttr(s) == stream)
        return order.opsOn(s);
    return {};
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
