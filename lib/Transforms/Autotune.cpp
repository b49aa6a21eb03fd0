//===- Autotune.cpp - choose S_p against the simulator --------------------===//
//
// FlowMoE §4.1: S_p is tuned by Bayesian optimisation on measured iteration
// times. At compile time the measurements are the simulator's predictions
// for the same schedule chunked with each proposed S_p.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/ModelStats.h"
#include "moe/Analysis/Simulator.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "moe_rt/sp_tuner.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/ToolOutputFile.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEAUTOTUNE
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

struct AutotunePass : public moe::impl::MoeAutotuneBase<AutotunePass> {
  using MoeAutotuneBase::MoeAutotuneBase;

  /// Simulated iteration time of `func` chunked with `sp` bytes.
  FailureOr<double> evaluate(FunctionOpInterface func, int64_t sp,
                             CostModel &model) {
    OpBuilder builder(func);
    Operation *copy = builder.clone(*func.getOperation());
    auto clone = cast<FunctionOpInterface>(copy);
    SymbolTable::setSymbolName(copy, (func.getName() + "__autotune").str());
    auto erase = llvm::make_scope_exit([&] { copy->erase(); });
    if (failed(chunkAllReduces(copy, sp)) || failed(insertSyncs(clone)))
      return failure();
    FailureOr<SimulationResult> result = simulate(clone, model);
    if (failed(result))
      return failure();
    return result->iterationUs;
  }

  LogicalResult tune(FunctionOpInterface func, moe_rt_tune_method tuneMethod,
                     CostModel &model, raw_ostream &os) {
    bool chunked = false;
    // App. D: the search space is (0, largest per-block all-reduce tensor];
    // the all-reduce of weights outside blocks (embeddings, LM head) counts
    // only when there is no block's.
    int64_t maxBytes = 0, maxOuterBytes = 0;
    for (Operation &op : func.getFunctionBody().front()) {
      if (isa<RecordEventOp, WaitEventOp>(op))
        return op.emitOpError() << "is a sync: run moe-autotune before "
                                   "moe-insert-syncs (it inserts them)";
      if (auto ar = dyn_cast<AllReduceOp>(op)) {
        auto task = ar->getAttrOfType<TaskAttr>(MoeDialect::getTaskAttrName());
        chunked |= ar.isChunk() || (task && task.getChunk() >= 0);
        int64_t bytes = 0;
        for (Value v : ar.getInputs())
          bytes += std::max<int64_t>(tensorBytes(v.getType()), 0);
        int64_t &slot = task && task.getBlock() < 0 ? maxOuterBytes : maxBytes;
        slot = std::max(slot, bytes);
      }
    }
    if (chunked)
      return mlir::emitError(func.getLoc())
             << "moe-autotune: the step is already chunked";
    if (maxBytes == 0)
      maxBytes = maxOuterBytes;
    if (maxBytes < 4)
      return mlir::emitError(func.getLoc())
             << "moe-autotune: the step has no all-reduce "
                "to chunk";
    moe_rt::SpTuner tuner(tuneMethod, static_cast<double>(maxBytes),
                          static_cast<int>(samples), seed);
    os << "autotune @" << func.getName() << " on profile "
       << model.getProfile().name << ", method " << method << ", " << samples
       << " samples over (0, " << maxBytes << "] bytes [simulated]\n";
    for (int64_t i = 1; !tuner.done(); ++i) {
      // Whole 4-byte elements, at least one.
      int64_t sp = std::max<int64_t>(4, int64_t(tuner.next()) / 4 * 4);
      FailureOr<double> us = evaluate(func, sp, model);
      if (failed(us))
        return failure();
      tuner.report(static_cast<double>(sp), *us);
      os << llvm::format("  sample %2lld: S_p = %10lld B -> %10.3f ms\n",
                         static_cast<long long>(i), static_cast<long long>(sp),
                         *us / 1000.0);
    }
    int64_t best = static_cast<int64_t>(tuner.bestSp());
    os << llvm::format("  best:      S_p = %10lld B -> %10.3f ms\n",
                       static_cast<long long>(best), tuner.bestTime() / 1000.0);
    if (failed(chunkAllReduces(func, best)) || failed(insertSyncs(func)))
      return failure();
    return success();
  }

  void runOnOperation() override {
    std::optional<moe_rt_tune_method> tuneMethod =
        llvm::StringSwitch<std::optional<moe_rt_tune_method>>(method)
            .Case("bo", MOE_RT_TUNE_BAYES)
            .Case("grid", MOE_RT_TUNE_GRID)
            .Case("random", MOE_RT_TUNE_RANDOM)
            .Default(std::nullopt);
    if (!tuneMethod) {
      mlir::emitError(getOperation().getLoc())
          << "moe-autotune: unknown method '" << method
          << "' (expected bo, grid or random)";
      return signalPassFailure();
    }
    if (samples < 1 || samples > 1000) {
      mlir::emitError(getOperation().getLoc())
          << "moe-autotune: samples must be in [1, 1000], got "
          << static_cast<int64_t>(samples);
      return signalPassFailure();
    }
    FailureOr<HardwareProfile> hw =
        loadPassProfile(getOperation(), "moe-autotune", profile);
    if (failed(hw))
      return signalPassFailure();
    auto file = openPassOutput(getOperation(), "moe-autotune", output);
    if (!file)
      return signalPassFailure();
    CostModel model(*hw);
    auto steps = functionsWith(
        getOperation(), MoeDialect::getScheduleAttrName(), "moe-autotune",
        "no scheduled step (run moe-schedule first)");
    if (failed(steps))
      return signalPassFailure();
    for (FunctionOpInterface func : *steps)
      if (failed(tune(func, *tuneMethod, model, file->os())))
        return signalPassFailure();
    file->keep();
  }
};
} // namespace
