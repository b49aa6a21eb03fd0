//===- ModelSummary.cpp - print a model's sizes and groups ----------------===//
//
// The numbers users check first when importing a model: FlowMoE Table 2's
// columns (L, B, N, M, H, E/P, k, f and the MHA+gate / expert parameter
// counts) and the per-block communication volumes that the scheduling
// passes trade off.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/ModelStats.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEMODELSUMMARY
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

void printText(raw_ostream &os, StringRef name, const ModelStats &s) {
  ModelAttr m = s.model;
  os << "model @" << name << "\n";
  os << "  L=" << m.getLayers() << " B=" << m.getBatch() << " N=" << m.getSeq()
     << " M=" << m.getEmbed() << " H=" << m.getHidden()
     << " E=" << m.getExperts() << " k=" << m.getTopK() << " f=";
  if (m.isDropless())
    os << "dropless";
  else
    os << llvm::format("%g", m.getF()) << " C=" << m.getCapacity();
  os << "\n";
  os << "  grid " << m.getGrid() << ": " << s.worldSize << " ranks; "
     << "expert-parallel " << s.epSize << ", data-parallel " << s.dpSize
     << ", intra-node " << s.intraSize << "; E/P=" << m.getExperts() / s.epSize
     << "\n";
  os << "  params: replicated " << s.totalDenseParams() << " (blocks "
     << s.totalDenseParams() - s.outerDenseParams << ", outside blocks "
     << s.outerDenseParams << "), experts on all ranks "
     << s.totalExpertParams() << "\n";
  for (const BlockStats &b : s.blocks) {
    os << "  block " << b.index << ": dense " << b.denseParams
       << " params, all-reduce " << b.allReduceBytes << " B, local experts "
       << b.localExpertParams << " params, dispatch ";
    if (b.dispatchBytesPerRank < 0)
      os << "dynamic";
    else
      os << b.dispatchBytesPerRank << " B/rank";
    os << " x" << b.numDispatches << "\n";
  }
}

llvm::json::Value toJson(StringRef name, const ModelStats &s) {
  ModelAttr m = s.model;
  llvm::json::Array blocks;
  for (const BlockStats &b : s.blocks)
    blocks.push_back(
        llvm::json::Object{{"index", b.index},
                           {"dense_params", b.denseParams},
                           {"all_reduce_bytes", b.allReduceBytes},
                           {"local_expert_params", b.localExpertParams},
                           {"dispatch_bytes_per_rank", b.dispatchBytesPerRank},
                           {"dispatches", b.numDispatches}});
  return llvm::json::Object{
      {"model", name},
      {"layers", m.getLayers()},
      {"batch", m.getBatch()},
      {"seq", m.getSeq()},
      {"embed", m.getEmbed()},
      {"hidden", m.getHidden()},
      {"experts", m.getExperts()},
      {"top_k", m.getTopK()},
      {"capacity_factor", m.getF()},
      {"capacity", m.isDropless() ? llvm::json::Value(nullptr)
                                  : llvm::json::Value(m.getCapacity())},
      {"world_size", s.worldSize},
      {"ep_size", s.epSize},
      {"dp_size", s.dpSize},
      {"intra_size", s.intraSize},
      {"dense_params", s.totalDenseParams()},
      {"outer_dense_params", s.outerDenseParams},
      {"expert_params", s.totalExpertParams()},
      {"blocks", std::move(blocks)}};
}

struct ModelSummaryPass
    : public moe::impl::MoeModelSummaryBase<ModelSummaryPass> {
  using MoeModelSummaryBase::MoeModelSummaryBase;

  void runOnOperation() override {
    std::string error;
    std::unique_ptr<llvm::ToolOutputFile> file = openOutputFile(output, &error);
    if (!file) {
      mlir::emitError(getOperation().getLoc())
          << "moe-model-summary: " << error;
      return signalPassFailure();
    }
    llvm::json::Array models;
    bool any = false;
    for (auto func : getOperation().getOps<FunctionOpInterface>()) {
      if (!func->hasAttr(MoeDialect::getModelAttrName()))
        continue;
      any = true;
      FailureOr<ModelStats> stats = computeModelStats(func);
      if (failed(stats))
        return signalPassFailure();
      if (json)
        models.push_back(toJson(func.getName(), *stats));
      else
        printText(file->os(), func.getName(), *stats);
    }
    if (!any) {
      mlir::emitError(getOperation().getLoc())
          << "moe-model-summary: no function carries a #moe.model attribute";
      return signalPassFailure();
    }
    if (json)
      file->os() << llvm::formatv("{0:2}", llvm::json::Value(std::move(models)))
                 << "\n";
    file->keep();
    markAllAnalysesPreserved();
  }
};
} // namespace
