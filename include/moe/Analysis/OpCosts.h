//===- OpCosts.h - work of an op and time of a collective -------*- C++ -*-===//
//
// The cost formulas on plain numbers, written once: the cost model reads
// an op's sizes from the IR and calls these; the FSMoE layer model
// (MoeLayerModel.h) calls them with the sizes of a layer it has not built
// as IR. Work is in the units of the profile's models: flops for GEMM-bound
// work, bytes for memory traffic and collectives
// (docs/profile-format.md says which bytes each collective counts).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_OPCOSTS_H
#define MOE_ANALYSIS_OPCOSTS_H

#include "moe/Analysis/HardwareProfile.h"

#include <cstdint>

namespace mlir::moe {

/// Which links a collective's group uses: none (one rank), only intra-node
/// links, or inter-node links too (the group spans nodes).
enum class Link { None, Intra, Inter };

/// GEMM flops of attention on batch x seq tokens of width embed: the Q, K,
/// V and output projections and the QK^T and PV products.
double attentionFlops(double batch, double seq, double embed, double heads,
                      double kvHeads, double headDim);
/// Memory traffic of attention's memory-bound passes (pre-norm, softmax):
/// four passes over its input.
double attentionMemoryBytes(double inputBytes);
/// Gate: scores for every expert, plus an auxiliary projection of
/// `auxColumns` (noisy top-k's noise weights, X-MoE's low-rank projection).
double gateFlops(double tokens, double embed, double experts,
                 double auxColumns);
/// Experts of `gemms` GEMMs of embed x hidden (2 for an MLP, 3 gated) on
/// `slots` tokens each.
double expertFlops(double localExperts, double slots, double embed,
                   double hidden, double gemms);

/// The group of `size` ranks, `perNode` of them on each node.
Link collectiveLink(int64_t size, int64_t perNode);

/// Time (us, without the per-task launch cost) of a collective over that
/// group moving `bytes` per rank. An all-to-all's traffic splits into an
/// intra-node and an inter-node share that run concurrently (NetMoE §3.1);
/// a reduction, gather or scatter runs at the pace of its slowest link.
/// Every collective over more than one rank also pays the profile's
/// collective_latency_us.
double collectiveUs(const HardwareProfile &profile, CollectiveKind kind,
                    double bytes, int64_t size, int64_t perNode);

} // namespace mlir::moe

#endif // MOE_ANALYSIS_OPCOSTS_H
