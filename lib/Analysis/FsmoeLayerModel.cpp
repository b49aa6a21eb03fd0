//===- FsmoeLayerModel.cpp - an MoE layer in FSMoE's layout ---------------===//

#include "moe/Analysis/FsmoeLayerModel.h"
#include "moe/Analysis/OpCosts.h"
#include "moe/Dialect/Moe/MoeOps.h"

#include <string>

using namespace mlir::moe;

namespace {

constexpr double kFloat = 4; // fp32 bytes

/// Eq. 1 for a collective of `bytes` per rank: alpha is its time for an
/// empty message, the rest scales with the chunk.
ChunkedCost chunked(const HardwareProfile &p, CollectiveKind kind,
                    double bytes, int64_t size, int64_t perNode) {
  double empty = collectiveUs(p, kind, 0, size, perNode);
  return {empty + p.launchUs,
          collectiveUs(p, kind, bytes, size, perNode) - empty};
}

} // namespace

std::string mlir::moe::checkFsmoeLayer(const FsmoeLayerShape &s,
                                       const HardwareProfile &p) {
  for (auto [name, v] : {std::pair<const char *, int64_t>{"batch", s.batch},
                         {"seq", s.seq},
                         {"embed", s.embed},
                         {"hidden", s.hidden},
                         {"heads", s.heads},
                         {"kv_heads", s.kvHeads},
                         {"experts", s.experts},
                         {"top_k", s.topK},
                         {"expert_gemms", s.expertGemms}})
    if (v < 1 || v > (int64_t(1) << 30))
      return std::string(name) + " must be in [1, 2^30]";
  if (s.gateAuxColumns < 0 || s.gateAuxColumns > (int64_t(1) << 30))
    return "gate_aux_columns must be in [0, 2^30]";
  if (!(s.capacityFactor > 0 && s.capacityFactor <= 1e3))
    return "capacity_factor must be in (0, 1000]";
  if (s.heads % s.kvHeads)
    return "heads must be a multiple of kv_heads";
  if (s.topK > s.experts)
    return "top_k must not exceed experts";
  if (s.experts % p.nodes)
    return "experts (" + std::to_string(s.experts) +
           ") must be a multiple of the nodes (" + std::to_string(p.nodes) +
           "): the layout puts E / nodes experts on each node";
  if ((s.batch * s.seq) % p.gpusPerNode)
    return "batch x seq (" + std::to_string(s.batch * s.seq) +
           ") must be a multiple of the GPUs per node (" +
           std::to_string(p.gpusPerNode) +
           "): the MP reduce-scatter splits the tokens over the node";
  return "";
}

FsmoeLayerCosts mlir::moe::fsmoeLayerCosts(const FsmoeLayerShape &s,
                                           const HardwareProfile &p) {
  const int64_t nodes = p.nodes, node = p.gpusPerNode; // N_EP, N_MP = N_ESP
  const double launch = p.launchUs, m = s.embed;
  FsmoeLayerCosts c;
  c.backwardFactor = p.backwardFactor;

  // After the MP reduce-scatter each rank routes B L / N_MP tokens.
  const int64_t tokens = s.batch * s.seq / node;
  c.capacity = expertCapacity(s.capacityFactor, s.topK, tokens, s.experts);
  const double slots = double(s.experts) * c.capacity; // E C per rank
  c.a2aBytes = slots * m * kFloat;
  // The node gathers its N_ESP ranks' received slots for its experts.
  c.agBytes = node * c.a2aBytes;
  c.expertFlops = expertFlops(double(s.experts) / nodes, nodes * node *
                                  double(c.capacity),
                              m, double(s.hidden) / node, s.expertGemms);

  // sharedNic: one NIC per node (Table 3), and each of the node's N_MP
  // ranks is in its own EP and DP group (§4: N_MP = N_ESP = GPUs per
  // node), so every rank sends its dispatch, combine and gradient
  // all-reduce while the node's other N_MP - 1 ranks send theirs. Fig. 5's
  // lines look timed one collective alone: Testbed B's all-to-all moves
  // 7/8 of its buffer off the node at 11.4 GB/s and its all-reduce at a
  // bus bandwidth of 11.7 GB/s, one rank's use of the 12.5 GB/s NIC. Shared
  // by N_MP ranks, each rank's bandwidth term is N_MP times the fit's (the
  // start-up is not shared). Algorithm 1 uses the fits as they are, so this
  // is a sensitivity reading (docs/fsmoe-reproduction.md), off by default.
  const double nicShare = s.sharedNic ? double(node) : 1.0;
  MoePhaseCosts &f = c.forward;
  f.allToAll = chunked(p, CollectiveKind::AllToAll, c.a2aBytes, nodes, 1);
  f.allToAll.workUs *= nicShare;
  f.allGather = chunked(p, CollectiveKind::AllGather, c.agBytes, node, node);
  f.reduceScatter =
      chunked(p, CollectiveKind::ReduceScatter, c.agBytes, node, node);
  f.expert = {p.gemm.alphaUs + launch, p.gemm.betaUs * c.expertFlops};
  c.backward = f.withExpertScaled(p.backwardFactor);

  // Attention, tensor-parallel: the node's ranks split the heads.
  const double activation = double(s.batch) * s.seq * m * kFloat;
  double attention =
      attentionFlops(s.batch, s.seq, m, double(s.heads) / node,
                     double(s.kvHeads) / node, m / s.heads);
  c.attentionUs = p.gemm.time(attention) +
                  p.memory.betaUs * attentionMemoryBytes(activation) + launch;
  c.gateUs =
      p.gemm.time(gateFlops(tokens, m, s.experts, s.gateAuxColumns)) + launch;
  if (s.order == TokenOrder::Sparse) {
    // Read the tokens, write the slots (and back for the inverse).
    c.orderUs = p.memory.time((tokens + slots) * m * kFloat) + launch;
  } else {
    // GShard: einsum of the T x E x C dispatch mask with the tokens.
    c.orderUs = p.gemm.time(2 * tokens * slots * m) + launch;
  }
  c.inverseOrderUs = c.orderUs;
  c.mpReduceScatterUs = collectiveUs(p, CollectiveKind::ReduceScatter,
                                     activation, node, node) +
                        launch;
  c.mpAllGatherUs =
      collectiveUs(p, CollectiveKind::AllGather, activation, node, node) +
      launch;

  // Replicated weights: the rank's share of the attention (Megatron splits
  // Q, K, V column-wise and the output row-wise, whose bias is whole), the
  // gate and the norms.
  const double kvDim = m * s.kvHeads / s.heads;
  double params = (2 * m * m + 2 * m * kvDim) / node;
  if (s.attentionBias)
    params += (m + 2 * kvDim) / node + m;
  params += m * (s.experts + s.gateAuxColumns);
  params += (s.attentionBias ? 4 : 2) * m; // two norms: gain (and bias)
  c.gradientBytes = params * kFloat;
  c.gradientAllReduce = {
      collectiveUs(p, CollectiveKind::AllReduce, 0, nodes, 1) + launch,
      nodes > 1 ? p.allReduce.inter.betaUs * nicShare : 0.0};
  return c;
}
