/*===- sample_placement.h - NetMoE's dynamic sample placement ----*- C++ -*-===*
 *
 * NetMoE (seeds/002, §3.2): at each MoE block's gather, choose the rank
 * every whole sample moves to, so that the gather of block l and the
 * scatter of block l+1 send the fewest tokens across nodes, then within
 * nodes, every rank keeping I/J samples. Two exact stages:
 *
 *   stage 1 (Eq. 6, 10): samples -> nodes, I/N each, minimising
 *            sum_i c_{i,node(i)} (Eq. 8, gather + next scatter);
 *   stage 2 (Eq. 7), per node: its samples -> its ranks, I/J each,
 *            minimising sum_i c'_{i,rank(i)} (Eq. 8).
 *
 * Each stage is a balanced assignment, solved exactly as a min-cost flow
 * (LEMON's network simplex) on the transportation network items -> bins,
 * which has the optimum of Kuhn-Munkres on the paper's bipartite graph
 * (bins duplicated capacity times) with I x N instead of I x I edges
 * (docs/netmoe-reproduction.md "Solver"). Plain C++17 behind this header;
 * LEMON stays inside runtime/planning. No call throws.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_SAMPLE_PLACEMENT_H
#define MOE_RT_SAMPLE_PLACEMENT_H

#include "moe_rt/routing_counts.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe_rt {
namespace planning {

/// Assigns each of `items` items to one of `bins` bins, bin b taking exactly
/// capacity[b] items (sum = items), minimising sum_i cost[i * bins + b(i)].
/// Exact: a min-cost flow on the items -> bins network. Returns "" and the
/// bin of each item, or what is wrong with the arguments.
std::string solveBalancedAssignment(const std::vector<int64_t> &cost,
                                    int items, int bins,
                                    const std::vector<int> &capacity,
                                    std::vector<int> &assignment);

/// The same problem in the paper's form: bin b duplicated capacity[b]
/// times, a square items x items assignment (what Kuhn-Munkres solves),
/// also by min-cost flow. Same optimum; for the benchmark and the tests.
std::string solveExpandedAssignment(const std::vector<int64_t> &cost,
                                    int items, int bins,
                                    const std::vector<int> &capacity,
                                    std::vector<int> &assignment);

/// One all-to-all of NetMoE's objective: a block's counts (samples x
/// experts) and where its experts sit (ExpDev).
struct LayerRouting {
  const CountMatrix *counts = nullptr;
  const std::vector<int> *expertRank = nullptr;
};

/// How each stage's assignment is solved: the transportation network
/// (default) or the paper's expanded square graph (benchmark, tests).
enum class AssignmentForm { Transportation, Expanded };

struct SamplePlacementProblem {
  Grid grid;
  AssignmentForm form = AssignmentForm::Transportation;
  /// Block l: the counts whose expert outputs the gather returns to the
  /// samples' new ranks (known: the gate has run).
  LayerRouting gather;
  /// Block l+1: the counts its scatter will send from the new ranks
  /// (predicted, routing_predictor.h). counts == nullptr drops the term:
  /// the last MoE block, or no prediction yet.
  LayerRouting nextScatter;
};

struct SamplePlacement {
  std::vector<int> sampleRank; ///< SmpDev(i) after the gather
  /// The stages' objectives at the optimum: inter-node tokens (stage 1)
  /// and intra-node tokens (stage 2) of the gather plus the next scatter
  /// (the latter with the counts given, i.e. as predicted).
  int64_t interNodeTokens = 0;
  int64_t intraNodeTokens = 0;
};

/// NetMoE's two-stage solve. Returns "" and the placement, or what is
/// wrong with the problem (shapes, ranks, I not a multiple of J).
std::string planSamplePlacement(const SamplePlacementProblem &problem,
                                SamplePlacement &placement);

/// Eq. 8's coefficients for one all-to-all, samples x nodes, row-major:
/// c_{i,n} = tokens of sample i to experts outside node n (what placing
/// sample i on node n sends across nodes).
std::vector<int64_t> interNodeCost(const LayerRouting &layer,
                                   const Grid &grid);
/// Eq. 8's c'_{i,j}, samples x ranks: tokens of sample i to experts on
/// rank j's node but not on rank j.
std::vector<int64_t> intraNodeCost(const LayerRouting &layer,
                                   const Grid &grid);

} // namespace planning
} // namespace moe_rt

#endif // MOE_RT_SAMPLE_PLACEMENT_H
