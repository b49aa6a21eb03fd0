//===- Simulate.cpp - predicted iteration time and timeline ---------------===//

#include "moe/Analysis/RoutingLoads.h"
#include "moe/Analysis/Simulator.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"

#include <map>

namespace mlir::moe {
#define GEN_PASS_DEF_MOESIMULATE
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

// `moe-opt --moe-simulate=profile=... --moe-trace=out.json`: a tool-level
// flag, since a pass option cannot be spelled `--moe-trace=FILE`.
static llvm::cl::opt<std::string>
    clTraceFile("moe-trace",
                llvm::cl::desc("With --moe-simulate: write a Chrome-trace / "
                               "Perfetto JSON timeline to this file"),
                llvm::cl::init(""));

namespace {

/// Ranks in the trace: the model's grid, or else the grid of the step's
/// first collective.
int64_t worldSize(FunctionOpInterface func) {
  FlatSymbolRefAttr gridName;
  if (auto model =
          func->getAttrOfType<ModelAttr>(MoeDialect::getModelAttrName()))
    gridName = model.getGrid();
  else
    func->walk([&](CollectiveOpInterface op) {
      gridName = op.getGridAttr();
      return WalkResult::interrupt();
    });
  int64_t world = 1;
  SymbolTableCollection table;
  if (gridName)
    if (auto grid =
            table.lookupNearestSymbolFrom<shard::GridOp>(func, gridName))
      for (int64_t d : grid.getShape())
        world *= ShapedType::isDynamic(d) ? 1 : d;
  return world;
}

struct SimulatePass : public moe::impl::MoeSimulateBase<SimulatePass> {
  using MoeSimulateBase::MoeSimulateBase;

  /// The recorded routing of routing-trace=, if given.
  std::shared_ptr<RoutingLoads> loads;

  void printText(raw_ostream &os, FunctionOpInterface func,
                 const HardwareProfile &hw, const SimulationResult &r) {
    auto ms = [](double us) { return llvm::format("%10.3f ms", us / 1000.0); };
    auto pct = [&](double us) {
      return llvm::format("(%5.1f%%)",
                          r.iterationUs > 0 ? 100.0 * us / r.iterationUs : 0.0);
    };
    auto policy =
        func->getAttrOfType<StringAttr>(MoeDialect::getScheduleAttrName());
    size_t comm = llvm::count_if(
        r.tasks, [](const SimulatedTask &t) { return t.communication; });
    size_t host = llvm::count_if(
        r.tasks, [](const SimulatedTask &t) { return t.host; });
    os << "simulated @" << func.getName() << " (policy "
       << (policy ? policy.getValue() : "?") << ") on profile " << hw.name
       << " [simulated, not measured]\n";
    if (loads)
      os << "  routing from trace " << routingTrace << ", step "
         << loads->step() << "\n";
    os << "  iteration time           " << ms(r.iterationUs) << "\n";
    os << "  compute busy             " << ms(r.computeBusyUs) << " "
       << pct(r.computeBusyUs) << "\n";
    os << "  communication busy       " << ms(r.commBusyUs) << " "
       << pct(r.commBusyUs) << "\n";
    os << "    inter-node links       " << ms(r.interCommBusyUs) << " "
       << pct(r.interCommBusyUs) << "\n";
    os << "    intra-node links       " << ms(r.intraCommBusyUs) << " "
       << pct(r.intraCommBusyUs) << "\n";
    // Host planners (docs/host-planners.md): their threads' busy time; a
    // solve the join waits for shows in the iteration time.
    if (host)
      os << "  host planners busy       " << ms(r.hostBusyUs) << " "
         << pct(r.hostBusyUs) << "\n";
    os << "  overlap                  " << ms(r.overlapUs) << "\n";
    os << "  exposed communication    " << ms(r.exposedCommUs) << "\n";
    os << "  lower bound              " << ms(r.lowerBoundUs)
       << "   (the busiest stream)\n";
    os << "  peak un-reduced grads    "
       << llvm::format("%10.3f MiB", r.peakPendingGradientBytes / 1048576.0)
       << "\n";
    os << "  tasks                    " << r.tasks.size() << " ("
       << r.tasks.size() - comm - host << " compute, " << comm
       << " communication";
    if (host)
      os << ", " << host << " host planner";
    os << ")\n";
  }

  llvm::json::Value toJson(FunctionOpInterface func, const HardwareProfile &hw,
                           const SimulationResult &r) {
    auto policy =
        func->getAttrOfType<StringAttr>(MoeDialect::getScheduleAttrName());
    // Busy time per FlowMoE task kind (forward and backward together), as
    // in FlowMoE Table 1's breakdown.
    std::map<std::string, double> byKind;
    for (const SimulatedTask &t : r.tasks) {
      auto task = t.op->getAttrOfType<TaskAttr>(MoeDialect::getTaskAttrName());
      byKind[task ? stringifyTaskKind(task.getKind()).str() : "other"] +=
          t.cost.us;
    }
    llvm::json::Object kinds;
    for (auto &[kind, us] : byKind)
      kinds[kind] = us;
    llvm::json::Object summary{
        {"busy_us_by_task", std::move(kinds)},
        {"function", func.getName()},
        {"policy", policy ? policy.getValue() : ""},
        {"profile", hw.name},
        {"simulated", true},
        {"iteration_us", r.iterationUs},
        {"compute_busy_us", r.computeBusyUs},
        {"comm_busy_us", r.commBusyUs},
        {"inter_comm_busy_us", r.interCommBusyUs},
        {"intra_comm_busy_us", r.intraCommBusyUs},
        {"overlap_us", r.overlapUs},
        {"exposed_comm_us", r.exposedCommUs},
        {"lower_bound_us", r.lowerBoundUs},
        {"peak_pending_gradient_bytes", r.peakPendingGradientBytes},
        {"tasks", static_cast<int64_t>(r.tasks.size())}};
    if (r.hostBusyUs > 0)
      summary["host_busy_us"] = r.hostBusyUs;
    if (loads) {
      summary["routing_trace"] = routingTrace;
      summary["routing_step"] = loads->step();
    }
    return summary;
  }

  void runOnOperation() override {
    FailureOr<HardwareProfile> hw =
        loadPassProfile(getOperation(), "moe-simulate", profile);
    if (failed(hw))
      return signalPassFailure();
    auto file = openPassOutput(getOperation(), "moe-simulate", output);
    if (!file)
      return signalPassFailure();
    std::string tracePath = trace.empty() ? clTraceFile.getValue() : trace;
    CostModel model(*hw);
    if (!routingTrace.empty()) {
      auto loaded = RoutingLoads::load(
          routingTrace,
          routingStep < 0 ? std::nullopt : std::optional<int64_t>(routingStep));
      if (!loaded) {
        mlir::emitError(getOperation().getLoc())
            << "moe-simulate: " << llvm::toString(loaded.takeError());
        return signalPassFailure();
      }
      loads = std::move(*loaded);
      model.setRoutingLoads(loads.get());
    }
    llvm::json::Array all;
    std::string traceText;
    bool any = false;
    for (auto func : getOperation().getOps<FunctionOpInterface>()) {
      if (!func->hasAttr(MoeDialect::getScheduleAttrName()))
        continue;
      any = true;
      FailureOr<SimulationResult> result = simulate(func, model);
      if (failed(result))
        return signalPassFailure();
      if (json)
        all.push_back(toJson(func, *hw, *result));
      else
        printText(file->os(), func, *hw, *result);
      if (!tracePath.empty() && traceText.empty())
        traceText = chromeTrace(*result, worldSize(func), func.getName());
    }
    if (!any) {
      mlir::emitError(getOperation().getLoc())
          << "moe-simulate: no scheduled step (run "
             "moe-schedule or moe-flowmoe-pipeline)";
      return signalPassFailure();
    }
    if (json)
      file->os() << llvm::formatv("{0:2}", llvm::json::Value(std::move(all)))
                 << "\n";
    file->keep();
    if (!tracePath.empty()) {
      auto traceFile =
          openPassOutput(getOperation(), "moe-simulate: trace", tracePath);
      if (!traceFile)
        return signalPassFailure();
      traceFile->os() << traceText << "\n";
      traceFile->keep();
    }
    markAllAnalysesPreserved();
  }
};
} // namespace
