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
                     "centralized-ar | fsmoe (needs profile and degree=1)"),
      llvm::cl::init("flowmoe")};
  Option<int64_t> tokenDegree{
      *this, "token-degree",
      llvm::cl::desc("r_fwd: token chunks per MoE layer (moe-token-pipeline; "
                     "1: none)"),
      llvm::cl::init(1)};
  Option<int64_t> tokenDegreeBwd{
      *this, "token-degree-bwd",
      llvm::cl::desc("r_bwd: token chunks in the backward (0: r_fwd)"),
      llvm::cl::init(0)};
  Option<bool> sharedCounts{
      *this, "shared-counts",
      llvm::cl::desc("moe-token-pipeline's shared-counts: one counts "
                     "exchange per variable-count layer (false: one per "
                     "chunk)"),
      llvm::cl::init(true)};
  // moe-build-train-step's options, with its defaults (docs/optimizers.md).
  Option<double> lr{*this, "lr",
                    llvm::cl::desc("Learning rate (the schedule's peak)"),
                    llvm::cl::init(kBuild.learningRate)};
  Option<std::string> optimizer{*this, "optimizer",
                                llvm::cl::desc("sgd | adamw"),
                                llvm::cl::init(kBuild.optimizer)};
  Option<double> momentum{*this, "momentum", llvm::cl::desc("SGD momentum"),
                          llvm::cl::init(kBuild.momentum)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("AdamW beta1"),
                       llvm::cl::init(kBuild.beta1)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("AdamW beta2"),
                       llvm::cl::init(kBuild.beta2)};
  Option<double> eps{*this, "eps", llvm::cl::desc("AdamW epsilon"),
                     llvm::cl::init(kBuild.eps)};
  Option<double> weightDecay{*this, "weight-decay",
                             llvm::cl::desc("Weight decay"),
                             llvm::cl::init(kBuild.weightDecay)};
  Option<double> clipNorm{
      *this, "clip-norm",
      llvm::cl::desc("Clip the global gradient norm (0: no clipping)"),
      llvm::cl::init(kBuild.clipNorm)};
  Option<std::string> lrSchedule{*this, "lr-schedule",
                                 llvm::cl::desc("constant | cosine"),
                                 llvm::cl::init(kBuild.lrSchedule)};
  Option<int64_t> warmup{*this, "warmup",
                         llvm::cl::desc("Warm-up updates (cosine)"),
                         llvm::cl::init(kBuild.warmup)};
  Option<int64_t> totalSteps{*this, "total-steps",
                             llvm::cl::desc("Last update of the decay"),
                             llvm::cl::init(kBuild.totalSteps)};
  Option<double> minLr{*this, "min-lr",
                       llvm::cl::desc("Final learning rate (cosine)"),
                       llvm::cl::init(kBuild.minLr)};

  MoeBuildTrainStepOptions buildOptions() const {
    MoeBuildTrainStepOptions o;
    o.learningRate = lr;
    o.optimizer = optimizer;
    o.momentum = momentum;
    o.beta1 = beta1;
    o.beta2 = beta2;
    o.eps = eps;
    o.weightDecay = weightDecay;
    o.clipNorm = clipNorm;
    o.lrSchedule = lrSchedule;
    o.warmup = warmup;
    o.totalSteps = totalSteps;
    o.minLr = minLr;
    return o;
  }
  static inline const MoeBuildTrainStepOptions kBuild{};
  Option<int64_t> droplessBound{
      *this, "dropless-bound",
      llvm::cl::desc("Rows each local expert may receive per micro-batch "
                     "under dropless routing (0: the worst case G*B*N)"),
      llvm::cl::init(0)};
  Option<std::string> profile{
      *this, "profile",
      llvm::cl::desc("Hardware profile for chunk-bytes=auto and policy=fsmoe"),
      llvm::cl::init("")};
  Option<bool> routingStats{
      *this, "routing-stats",
      llvm::cl::desc("Gather each forward dispatch's per-sample expert "
                     "counts on every rank (moe-routing-stats)"),
      llvm::cl::init(false)};
  Option<bool> expertPlacement{
      *this, "expert-placement",
      llvm::cl::desc("The expert placement as a step input of every "
                     "variable-count dispatch and combine "
                     "(moe-expert-placement)"),
      llvm::cl::init(false)};
  Option<bool> netmoe{
      *this, "netmoe",
      llvm::cl::desc("NetMoE: place whole samples at every MoE block's "
                     "combine (moe-netmoe, before moe-microbatch)"),
      llvm::cl::init(false)};
  Option<bool> esp{
      *this, "esp",
      llvm::cl::desc("FSMoE's expert-sharding parallelism: each expert's "
                     "hidden dimension over the model's intra-node axes "
                     "(moe-expert-sharding, before moe-microbatch)"),
      llvm::cl::init(false)};
  Option<bool> mp{
      *this, "mp",
      llvm::cl::desc("Tensor-parallel attention (FSMoE's MP): heads over "
                     "the model's intra-node axes, samples all-gathered "
                     "before and reduce-scattered after "
                     "(moe-tensor-parallel, before moe-microbatch)"),
      llvm::cl::init(false)};
  Option<bool> netmoePredict{
      *this, "netmoe-predict",
      llvm::cl::desc("NetMoE's planner also prices the next block's "
                     "dispatch, with predicted counts (false: gather only)"),
      llvm::cl::init(true)};
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
        if (options.netmoe)
          pm.addPass(createMoeNetMoe(
              MoeNetMoeOptions{/*identity=*/false, options.netmoePredict}));
        // ESP: a capacity-routed model before the micro-batches, a dropless
        // one once its dispatches are variable-count (below).
        if (options.esp)
          pm.addPass(createMoeExpertSharding(MoeExpertShardingOptions{"capacity"}));
        if (options.mp)
          pm.addPass(createMoeTensorParallel());
        pm.addPass(createMoeMicrobatch(MoeMicrobatchOptions{options.degree}));
        pm.addPass(createMoeVariableDropless(
            MoeVariableDroplessOptions{options.droplessBound}));
        if (options.esp)
          pm.addPass(createMoeExpertSharding(MoeExpertShardingOptions{"variable"}));
        pm.addPass(createMoeBuildTrainStep(options.buildOptions()));
        // FSMoE: per-layer degrees and gradient slices from the profile,
        // carried out by the token pipeline and the schedule.
        bool fsmoe = options.policy == "fsmoe";
        if (fsmoe) {
          MoeFsmoePlanOptions plan;
          plan.profile = options.profile;
          pm.addPass(createMoeFsmoePlan(plan));
        }
        if (fsmoe || options.tokenDegree != 1 || options.tokenDegreeBwd > 1)
          pm.addPass(createMoeTokenPipeline(MoeTokenPipelineOptions{
              options.tokenDegree, options.tokenDegreeBwd,
              options.sharedCounts}));
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
        if (options.expertPlacement)
          pm.addPass(createMoeExpertPlacement());
        if (options.routingStats)
          pm.addPass(createMoeRoutingStats());
        pm.addPass(createMoeVerifySchedule());
      });
}
