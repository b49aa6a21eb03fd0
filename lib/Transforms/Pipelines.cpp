//===- Pipelines.cpp - named pass pipelines -------------------------------===//
//
// moe-flowmoe-pipeline: the FlowMoE compilation flow. moe-microbatch runs
// first, on the forward model; moe-variable-dropless then gives dropless
// routing its variable-count form (a no-op for capacity routing), so that
// the vjps see the `rows` operands; moe-build-train-step differentiates
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
  Option<int64_t> degree{*this, "degree", llvm::cl::desc("Pipelining degree R"),
                         llvm::cl::init(2)};
  Option<std::string> chunkBytes{
      *this, "chunk-bytes",
      llvm::cl::desc("All-reduce chunk size S_p (e.g. 2MiB), or auto to "
                     "tune it on `profile`"),
      llvm::cl::init("2MiB")};
  Option<std::string> policy{
      *this, "policy",
      llvm::cl::desc("vanilla | pipe-moe | flowmoe-at | flowmoe | "
                     "centralized-ar"),
      llvm::cl::init("flowmoe")};
  Option<double> lr{*this, "lr", llvm::cl::desc("SGD learning rate"),
                    llvm::cl::init(0.01)};
  Option<int64_t> droplessBound{
      *this, "dropless-bound",
      llvm::cl::desc("Rows each local expert may receive per micro-batch "
                     "under dropless routing (0: the worst case G*B*N)"),
      llvm::cl::init(0)};
  Option<std::string> profile{
      *this, "profile", llvm::cl::desc("Hardware profile for chunk-bytes=auto"),
      llvm::cl::init("")};
  Option<std::string> tune{
      *this, "tune",
      llvm::cl::desc("S_p search for chunk-bytes=auto: bo | grid | random"),
      llvm::cl::init("bo")};
};
} // namespace

void mlir::moe::registerMoePipelines() {
  PassPipelineRegistration<FlowMoePipelineOptions>(
      "moe-flowmoe-pipeline",
      "Microbatch, build the training step, schedule, chunk gradients, "
      "insert syncs and verify (FlowMoE §3)",
      [](OpPassManager &pm, const FlowMoePipelineOptions &options) {
        pm.addPass(createMoeMicrobatch(MoeMicrobatchOptions{options.degree}));
        pm.addPass(createMoeVariableDropless(
            MoeVariableDroplessOptions{options.droplessBound}));
        pm.addPass(
            createMoeBuildTrainStep(MoeBuildTrainStepOptions{options.lr}));
        pm.addPass(createMoeSchedule(MoeScheduleOptions{options.policy}));
        if (options.chunkBytes == "auto") {
          // Bayesian optimisation of S_p against the simulator (§4.1); it
          // chunks and inserts the syncs itself.
          MoeAutotuneOptions tuneOptions;
          tuneOptions.profile = options.profile;
          tuneOptions.method = options.tune;
          pm.addPass(createMoeAutotune(tuneOptions));
        } else {
          pm.addPass(createMoeChunkGradients(
              MoeChunkGradientsOptions{options.chunkBytes}));
          pm.addPass(createMoeInsertSyncs());
        }
        pm.addPass(createMoeVerifySchedule());
      });
}
