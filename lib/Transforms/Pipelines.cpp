//===- Pipelines.cpp - named pass pipelines -------------------------------===//
//
// moe-flowmoe-pipeline: the FlowMoE compilation flow. moe-microbatch runs
// first, on the forward model, so that moe-build-train-step differentiates
// each micro-batch's tasks separately and accumulates their weight
// gradients; then the step is scheduled, its all-reduces chunked, its
// cross-stream dependencies made explicit and the result verified.
//
//===----------------------------------------------------------------------===//

#include "moe/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace mlir::moe;

namespace {
struct FlowMoePipelineOptions
    : public PassPipelineOptions<FlowMoePipelineOptions> {
  Option<int64_t> degree{*this, "degree",
                         llvm::cl::desc("Pipelining degree R"),
                         llvm::cl::init(2)};
  Option<std::string> chunkBytes{
      *this, "chunk-bytes",
      llvm::cl::desc("All-reduce chunk size S_p (e.g. 2MiB)"),
      llvm::cl::init("2MiB")};
  Option<std::string> policy{
      *this, "policy",
      llvm::cl::desc("vanilla | pipe-moe | flowmoe-at | flowmoe | "
                     "centralized-ar"),
      llvm::cl::init("flowmoe")};
  Option<double> lr{*this, "lr", llvm::cl::desc("SGD learning rate"),
                    llvm::cl::init(0.01)};
};
} // namespace

void mlir::moe::registerMoePipelines() {
  PassPipelineRegistration<FlowMoePipelineOptions>(
      "moe-flowmoe-pipeline",
      "Microbatch, build the training step, schedule, chunk gradients, "
      "insert syncs and verify (FlowMoE §3)",
      [](OpPassManager &pm, const FlowMoePipelineOptions &options) {
        pm.addPass(createMoeMicrobatch(MoeMicrobatchOptions{options.degree}));
        pm.addPass(
            createMoeBuildTrainStep(MoeBuildTrainStepOptions{options.lr}));
        pm.addPass(createMoeSchedule(MoeScheduleOptions{options.policy}));
        pm.addPass(createMoeChunkGradients(
            MoeChunkGradientsOptions{options.chunkBytes}));
        pm.addPass(createMoeInsertSyncs());
        pm.addPass(createMoeVerifySchedule());
      });
}
