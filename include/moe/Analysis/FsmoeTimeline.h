//===- FsmoeTimeline.h - FSMoE and its baselines as timelines ---*- C++ -*-===//
//
// A training step of a stack of identical FSMoE-layout layers
// (FsmoeLayerModel.h), planned by one of the schedules FSMoE compares
// (§6.3, Fig. 3, Table 5) and executed on three resources -- compute, the
// inter-node link, the intra-node link -- by the simulator's list
// scheduling (ListScheduler.h), in FSMoE's FIFO issue order (digest §3):
//   inter-node: D_1..D_r, [gradient all-reduce slice], C_1..C_r
//   intra-node: AG_1..AG_r, RS_1..RS_r      compute: E_1..E_r
// Without FSMoE's inter/intra-node overlap ("IIo": the ESP all-gathers and
// reduce-scatters beside the all-to-alls, §2.3) -- FSMoE-No-IIo, Tutel,
// DeepSpeed-MoE -- the MoE layer's collectives share one queue in that same
// order. The model-parallel collectives of the dense parts always use the
// intra-node link and the gradient all-reduce the inter-node one: the
// window FSMoE's code gives a gradient slice beside the dense parts
// includes the MP all-gather and reduce-scatter (digest §4, t_others).
//
// The plans are the paper's: FSMoE decides with Algorithm 1 and §5's
// partition (PipelineDegree.h, GradientPartition.h); the timeline then
// says what that plan costs, so a plan's predicted time and its simulated
// time can be compared.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_FSMOETIMELINE_H
#define MOE_ANALYSIS_FSMOETIMELINE_H

#include "moe/Analysis/FsmoeLayerModel.h"
#include "moe/Analysis/Simulator.h"

#include <string>
#include <vector>

namespace mlir::moe {

enum class LayerSchedule {
  /// DeepSpeed-MoE-style vanilla (Fig. 3a): no pipelining, GShard's einsum
  /// token order, one link, gradient all-reduce after the backward pass.
  DeepSpeedMoE,
  /// Tutel with PipeMoE's pipelining: one degree for both phases (the one
  /// of 1, 2, 4, 8 whose step is fastest), one link, gradient all-reduce
  /// after the backward pass.
  Tutel,
  /// Tutel-Improved: Tutel with the gradient all-reduce overlapped with the
  /// non-MoE parts of the backward pass only.
  TutelImproved,
  /// FSMoE without the inter/intra-node overlap: per-phase degrees and
  /// gradient partitioning, decided for one shared link.
  FsmoeNoIIo,
  /// FSMoE: Algorithm 1 per phase, §5's partition, two links.
  Fsmoe,
};

const char *scheduleName(LayerSchedule schedule);

/// `layers` identical layers, plus what a whole model adds.
struct FsmoeStack {
  FsmoeLayerCosts layer;
  int64_t layers = 1;
  /// One period of a deep stack, as a configured-layer benchmark measures
  /// it (FSMoE §6.3 "adds the gradient aggregation of a configured
  /// layer"): the gradient of the layer above is ready when the backward
  /// pass starts, and the first layer's own gradient is handed to the
  /// layer below instead of being reduced in this step.
  bool steadyState = false;
  /// A whole model: the LM head (forward time; its backward is
  /// backwardFactor x), the embedding's backward, the gradient of the
  /// (tied) embedding produced at the end of the backward pass, and the
  /// optimizer update after the gradient all-reduce.
  double headUs = 0, embeddingBackwardUs = 0, headGradientBytes = 0,
         optimizerUs = 0;
};

struct StepPlan {
  LayerSchedule schedule = LayerSchedule::Fsmoe;
  /// Per layer, in forward order.
  std::vector<int64_t> forwardDegree, backwardDegree;
  /// Bytes all-reduced in each backward window (backwardWindows order);
  /// the rest is reduced after the backward pass.
  std::vector<double> sliceBytes;
  /// FSMoE's inter/intra-node overlap inside the MoE layer; false: its
  /// all-gathers and reduce-scatters queue behind its all-to-alls.
  bool overlapIntraInter = true;
  /// The partition behind sliceBytes (FSMoE, FSMoE-No-IIo).
  GradientPlan gradients;
};

struct PlanOptions {
  DegreeOptions degrees;
  bool differentialEvolution = true;
  EvolutionOptions evolution;
  /// FSMoE's published code, not the paper: r_fwd = 1 when one whole
  /// forward all-to-all takes under 1 ms (the backward degrees stay
  /// Algorithm 1's for each layer's gradient slice, as in the code).
  bool smallAllToAllRule = false;
};

/// The backward windows of the stack (GradientPartition.h), in execution
/// order: for each layer from the last, the dense stretch before its MoE
/// (the MP all-gather's and the inverse order's backward), the MoE layer,
/// and the dense stretch after it (order, gate, MP reduce-scatter and
/// attention backward), whose attention produces the layer's gradient:
/// ready before the next layer's first window. A dense window's length is
/// that of its tasks, which use compute and the intra-node link only.
std::vector<GradientWindow> backwardWindows(const FsmoeStack &stack);

/// The plan `schedule` makes for the stack.
StepPlan planStep(const FsmoeStack &stack, LayerSchedule schedule,
                  const PlanOptions &options = {});

/// The step's timeline under `plan`, whose slices must be causal
/// (isCausalPartition over backwardWindows): tasks with their streams
/// (compute, inter-node "comm", intra-node "comm1"), start and end, a
/// gradient all-reduce's bytes in its cost; summarised like the IR
/// simulator's, so chromeTrace writes it for Perfetto.
SimulationResult simulateStep(const FsmoeStack &stack, const StepPlan &plan);

/// One MoE phase alone on its timeline (dispatch input ready at 0): its
/// makespan with a gradient all-reduce slice of `tGarUs` after the last
/// dispatch. With overlapIntraInter it is what Algorithm 1's cases
/// approximate.
double simulateMoePhase(const MoePhaseCosts &costs, int64_t degree,
                        double tGarUs, bool overlapIntraInter);

} // namespace mlir::moe

#endif // MOE_ANALYSIS_FSMOETIMELINE_H
