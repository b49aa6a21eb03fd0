/*===- routing_counts.h - what a gate decided, and what follows --*- C++ -*-===*
 *
 * The routing facts every load-aware planner reads (NetMoE, FlexMoE,
 * Pro-Prophet; docs/load-aware.md): the sample x expert token counts of one
 * MoE block (NetMoE Eq. 2's num), the cluster grid, and what follows from
 * them given where samples and experts sit -- the per-rank x expert sums,
 * the load balance, and one all-to-all's local / intra-node / inter-node
 * token volumes (NetMoE Eq. 3-4). Part of moe_planning (runtime/planning):
 * plain C++17, no MPI/CUDA/BLAS, so the runtime and the compiler's simulator
 * both link it. No function throws; bad shapes are the caller's bug and are
 * checked by the trace reader (routing_trace.h) before they get here.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_ROUTING_COUNTS_H
#define MOE_RT_ROUTING_COUNTS_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moe_rt {
namespace planning {

/// nodes x ranks per node, as the IR's shard.grid (axis 0 is nodes): rank r
/// sits on node r / ranksPerNode.
struct Grid {
  int nodes = 1;
  int ranksPerNode = 1;
  int ranks() const { return nodes * ranksPerNode; }
  int nodeOf(int rank) const { return rank / ranksPerNode; }
  bool operator==(const Grid &o) const {
    return nodes == o.nodes && ranksPerNode == o.ranksPerNode;
  }
};

/// rows x experts token counts, row-major. For a trace record the rows are
/// samples (NetMoE's num: tokens of sample i the gate routed to expert e,
/// before capacity); rankExpertCounts gives rows = ranks.
struct CountMatrix {
  int rows = 0;
  int experts = 0;
  std::vector<uint32_t> values;

  CountMatrix() = default;
  CountMatrix(int rows, int experts)
      : rows(rows), experts(experts),
        values(static_cast<size_t>(rows) * static_cast<size_t>(experts)) {}

  uint32_t &at(int row, int e) {
    return values[static_cast<size_t>(row) * experts + e];
  }
  uint32_t at(int row, int e) const {
    return values[static_cast<size_t>(row) * experts + e];
  }
  const uint32_t *row(int r) const {
    return values.data() + static_cast<size_t>(r) * experts;
  }
  uint64_t rowSum(int r) const;
  uint64_t total() const;
  bool operator==(const CountMatrix &o) const {
    return rows == o.rows && experts == o.experts && values == o.values;
  }
};

/// The per-rank x expert sums: row r adds the counts of the samples that
/// sit on rank r (what rank r's dispatch sends to each expert; FlexMoE's
/// I_{e,g} by source, Pro-Prophet's device x expert "gating" matrix).
CountMatrix rankExpertCounts(const CountMatrix &sampleCounts,
                             const std::vector<int> &sampleRank, int ranks);

/// Load balance of one block: tokens each rank's experts receive and each
/// expert receives, as max / mean (1 = balanced; FlexMoE Eq. 6 is the rank
/// ratio).
struct LoadBalance {
  uint64_t maxRankTokens = 0, maxExpertTokens = 0;
  double meanRankTokens = 0, meanExpertTokens = 0;
  double rankRatio() const {
    return meanRankTokens > 0 ? maxRankTokens / meanRankTokens : 1.0;
  }
  double expertRatio() const {
    return meanExpertTokens > 0 ? maxExpertTokens / meanExpertTokens : 1.0;
  }
};
LoadBalance loadBalance(const CountMatrix &sampleCounts,
                        const std::vector<int> &expertRank, int ranks);

/// Tokens one all-to-all moves (NetMoE Eq. 3-4), whole cluster: `local`
/// stays on its rank (a memory copy, free in NetMoE's model), `intraNode`
/// crosses ranks of one node, `interNode` crosses nodes. The scatter from
/// samples at sampleRank to the experts and the gather back to samples at
/// sampleRank move the same volumes.
struct AllToAllVolume {
  uint64_t local = 0, intraNode = 0, interNode = 0;
  AllToAllVolume &operator+=(const AllToAllVolume &o) {
    local += o.local;
    intraNode += o.intraNode;
    interNode += o.interNode;
    return *this;
  }
};
AllToAllVolume allToAllVolume(const CountMatrix &sampleCounts,
                              const std::vector<int> &sampleRank,
                              const std::vector<int> &expertRank,
                              const Grid &grid);

/// The data loader's placement: sample i on rank i / (samples / ranks).
std::vector<int> contiguousPlacement(int samples, int ranks);

/// Expert parallelism's placement (moe.dispatch's E_l x (G C) x M layout):
/// expert e on rank e / (experts / ranks).
std::vector<int> expertParallelPlacement(int experts, int ranks);

} // namespace planning
} // namespace moe_rt

#endif // MOE_RT_ROUTING_COUNTS_H
