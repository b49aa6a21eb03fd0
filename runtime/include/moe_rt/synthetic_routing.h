/*===- synthetic_routing.h - routing traces with skew and locality -*- C++ -*-=*
 *
 * Synthetic routing traces (docs/routing-trace-format.md "Synthetic
 * traces") for benchmarks and tests until real ones are recorded. Two
 * effects the seed papers measure, each a parameter:
 *
 *  - expert skew (FlexMoE Fig. 3a, Pro-Prophet Fig. 3): block l's expert
 *    popularity is Zipf, p(rank r) ~ 1 / (r + 1)^zipf, over a random
 *    permutation of the experts per block;
 *  - per-sample locality (NetMoE §3.1: "tokens of the same sample are
 *    usually routed to the same expert"): each sample has a topic, kept
 *    through all blocks of a step; each (block, topic) prefers
 *    topicExperts experts (drawn by popularity), and a share `locality` of
 *    a sample's routing goes to its topic's experts:
 *        pi_{i,l} = (1 - locality) zipf_l + locality uniform(topic experts)
 *
 * Each token then picks topK distinct experts from pi (successive sampling
 * without replacement). Samples start on the data loader's ranks (sample i
 * on rank i / (I/J)); experts sit E/J per rank in order unless expertRank
 * says otherwise. Deterministic for a seed on every platform (mt19937_64
 * and its own distributions, not <random>'s, which differ by library).
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_SYNTHETIC_ROUTING_H
#define MOE_RT_SYNTHETIC_ROUTING_H

#include "moe_rt/routing_trace.h"

#include <functional>

namespace moe_rt {
namespace planning {

struct SyntheticRouting {
  Grid grid;
  int samples = 0;  ///< I, all ranks (a multiple of the ranks)
  int tokens = 0;   ///< L, per sample
  int experts = 0;  ///< E, per block
  int topK = 1;     ///< K
  int blocks = 1;   ///< MoE blocks 0 .. blocks-1
  int64_t steps = 1;
  int micro = 1;    ///< micro-batches per step, each with fresh samples
  double zipf = 1.0;      ///< expert skew exponent (0 = uniform)
  double locality = 0.5;  ///< share of a sample's routing following its topic
  int topics = 16;        ///< distinct sample topics
  int topicExperts = 2;   ///< experts a (block, topic) prefers
  uint64_t seed = 1;
  std::vector<int> expertRank; ///< empty: E/J experts per rank, in order
};

/// What is wrong with the parameters, or "".
std::string checkSyntheticRouting(const SyntheticRouting &config);

/// The trace header the generator's records belong to.
TraceHeader syntheticHeader(const SyntheticRouting &config);

/// Generates the records in trace order, handing each to `sink` (which
/// returns false to stop). Returns "" or what is wrong with the config.
std::string
generateSyntheticRouting(const SyntheticRouting &config,
                         const std::function<bool(const TraceRecord &)> &sink);

} // namespace planning
} // namespace moe_rt

#endif // MOE_RT_SYNTHETIC_ROUTING_H
