//===- FsmoeLayerModel.h - an MoE layer in FSMoE's layout -------*- C++ -*-===//
//
// The analytical model of one transformer layer as FSMoE trains it (Fig. 2,
// §4): DP + MP + EP + ESP with the model-parallel (MP) and expert-sharding
// (ESP) groups equal to a node's GPUs, so that
// - attention is tensor-parallel over the node (N_MP = GPUs per node),
//   with an MP reduce-scatter after it and an MP all-gather after the MoE
//   (intra-node);
// - the dispatch / combine all-to-alls run over one GPU per node (N_EP =
//   nodes; inter-node);
// - each expert's hidden dimension is sharded over the node: ESP
//   all-gather of the dispatched tokens before it, reduce-scatter after
//   (intra-node);
// - the replicated (dense) weights are all-reduced over one GPU per node
//   (inter-node, the "gradient all-reduce", GAR).
// Per-rank volumes follow FSMoE's code (digest §2): n_a2a = k f B L M /
// N_ESP, n_ag = n_rs = k f B L M, expert MACs k f B L M H / N_ESP x GEMMs.
// Every time comes from a hardware profile through the cost model's
// formulas (OpCosts.h), so the layer model and `moe-simulate` agree.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_FSMOELAYERMODEL_H
#define MOE_ANALYSIS_FSMOELAYERMODEL_H

#include "moe/Analysis/GradientPartition.h"
#include "moe/Analysis/HardwareProfile.h"
#include "moe/Analysis/PipelineDegree.h"

#include <cstdint>
#include <string>

namespace mlir::moe {

/// How tokens are laid out for the dispatch (FSMoE §2.1 "Order"): Tutel's
/// sparse scatter (memory-bound) or GShard's dense einsum with a T x E x C
/// dispatch mask (GEMM-bound; DeepSpeed-MoE uses it).
enum class TokenOrder { Sparse, Einsum };

struct FsmoeLayerShape {
  int64_t batch = 1;   // B, samples per model-parallel group
  int64_t seq = 1024;  // L
  int64_t embed = 1024, hidden = 4096; // M, H
  int64_t heads = 16, kvHeads = 16;
  int64_t experts = 8, topK = 2; // E, k
  double capacityFactor = 1.2;   // f
  int64_t expertGemms = 2;       // 2: GPT MLP; 3: Mixtral's gated MLP
  /// Extra gate projection columns: E for GShard's noise weights, the
  /// low-rank dimension for X-MoE; 0 for a plain linear gate.
  int64_t gateAuxColumns = 0;
  /// Bias vectors in attention (GPT) or none (Mixtral); they count in the
  /// replicated gradient.
  bool attentionBias = true;
  TokenOrder order = TokenOrder::Sparse;
  /// A reading, not the paper's model: the node's N_MP ranks run their
  /// inter-node collectives (each its own dispatch / combine all-to-all and
  /// gradient all-reduce) at the same time through the node's one NIC, so
  /// each gets 1/N_MP of the bandwidth the profile's fit was timed with
  /// (FsmoeLayerModel.cpp). False (the paper's Algorithm 1): the fit as is.
  bool sharedNic = false;
};

/// One layer's task times (us, each with the profile's launch cost).
/// Forward times; a backward compute task costs backwardFactor x its
/// forward time, a backward collective the same as its forward.
struct FsmoeLayerCosts {
  /// Algorithm 1's inputs, forward and backward (expert x backwardFactor).
  MoePhaseCosts forward, backward;
  double attentionUs = 0, gateUs = 0, orderUs = 0, inverseOrderUs = 0;
  double mpReduceScatterUs = 0, mpAllGatherUs = 0;
  double backwardFactor = 2;
  /// Bytes of replicated weights' gradients (attention, gate, norms).
  double gradientBytes = 0;
  AllReduceTime gradientAllReduce;
  /// Per-rank sizes, for reports.
  int64_t capacity = 0; // slots per expert per rank
  double a2aBytes = 0, agBytes = 0, expertFlops = 0;
};

/// Checks that the shape fits the layout of `profile`'s mesh (positive
/// sizes, experts a multiple of the nodes); returns "" or the reason.
std::string checkFsmoeLayer(const FsmoeLayerShape &shape,
                            const HardwareProfile &profile);

/// The layer's costs on `profile`, whose mesh is the layout.
FsmoeLayerCosts fsmoeLayerCosts(const FsmoeLayerShape &shape,
                                const HardwareProfile &profile);

} // namespace mlir::moe

#endif // MOE_ANALYSIS_FSMOELAYERMODEL_H
