//===- SamplePlacement.cpp - NetMoE's two-stage sample placement ----------===//
//
// NetMoE §3.2. Inside each stage alpha and beta are constants, so the
// placement depends only on token counts, never on profiled bandwidths;
// the stage order is the only weighting (inter-node first, Eq. 6, then
// intra-node within each node, Eq. 7, which cannot change stage 1's
// inter-node volume). Both all-to-alls the placement affects -- the gather
// of block l and the scatter of block l+1 -- enter each stage's costs.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/sample_placement.h"

namespace moe_rt {
namespace planning {

namespace {

std::string checkLayer(const char *name, const LayerRouting &layer,
                       int samples, const Grid &grid) {
  std::string n = name;
  if (!layer.counts || !layer.expertRank)
    return n + ": no counts or expert placement";
  if (layer.counts->rows != samples)
    return n + ": counts for " + std::to_string(layer.counts->rows) +
           " samples, the gather has " + std::to_string(samples);
  if (int(layer.expertRank->size()) != layer.counts->experts)
    return n + ": " + std::to_string(layer.expertRank->size()) +
           " expert ranks for " + std::to_string(layer.counts->experts) +
           " experts";
  for (int r : *layer.expertRank)
    if (r < 0 || r >= grid.ranks())
      return n + ": an expert on rank " + std::to_string(r) +
             ", the grid has " + std::to_string(grid.ranks()) + " ranks";
  return "";
}

/// tokens[i * width + bucket(e)] summed over experts: per sample, the
/// tokens to each node (bucket = node of the expert's rank) or each rank.
std::vector<int64_t> tokensBy(const LayerRouting &layer, int width,
                              int (*bucket)(const Grid &, int),
                              const Grid &grid) {
  const CountMatrix &c = *layer.counts;
  std::vector<int> where(c.experts);
  for (int e = 0; e < c.experts; ++e)
    where[e] = bucket(grid, (*layer.expertRank)[e]);
  std::vector<int64_t> out(size_t(c.rows) * width, 0);
  for (int i = 0; i < c.rows; ++i) {
    const uint32_t *row = c.row(i);
    int64_t *dst = out.data() + size_t(i) * width;
    for (int e = 0; e < c.experts; ++e)
      dst[where[e]] += row[e];
  }
  return out;
}

int nodeBucket(const Grid &g, int rank) { return g.nodeOf(rank); }
int rankBucket(const Grid &, int rank) { return rank; }

std::string solveStage(AssignmentForm form, const std::vector<int64_t> &cost,
                       int items, int bins, int capacity,
                       std::vector<int> &assignment) {
  std::vector<int> caps(bins, capacity);
  return form == AssignmentForm::Expanded
             ? solveExpandedAssignment(cost, items, bins, caps, assignment)
             : solveBalancedAssignment(cost, items, bins, caps, assignment);
}

void addInto(std::vector<int64_t> &sum, const std::vector<int64_t> &term) {
  for (size_t k = 0; k < sum.size(); ++k)
    sum[k] += term[k];
}

} // namespace

std::vector<int64_t> interNodeCost(const LayerRouting &layer,
                                   const Grid &grid) {
  int nodes = grid.nodes;
  std::vector<int64_t> cost = tokensBy(layer, nodes, nodeBucket, grid);
  for (int i = 0; i < layer.counts->rows; ++i) {
    int64_t *row = cost.data() + size_t(i) * nodes;
    int64_t all = int64_t(layer.counts->rowSum(i));
    for (int n = 0; n < nodes; ++n)
      row[n] = all - row[n]; // tokens to experts outside node n
  }
  return cost;
}

std::vector<int64_t> intraNodeCost(const LayerRouting &layer,
                                   const Grid &grid) {
  int ranks = grid.ranks();
  std::vector<int64_t> toNode = tokensBy(layer, grid.nodes, nodeBucket, grid);
  std::vector<int64_t> cost = tokensBy(layer, ranks, rankBucket, grid);
  for (int i = 0; i < layer.counts->rows; ++i)
    for (int j = 0; j < ranks; ++j) {
      int64_t &c = cost[size_t(i) * ranks + j];
      // Tokens to rank j's node, less those that stay on rank j.
      c = toNode[size_t(i) * grid.nodes + grid.nodeOf(j)] - c;
    }
  return cost;
}

std::string planSamplePlacement(const SamplePlacementProblem &p,
                                SamplePlacement &out) {
  const Grid &grid = p.grid;
  if (grid.nodes < 1 || grid.ranksPerNode < 1)
    return "the grid needs at least one node and one rank per node";
  int samples = p.gather.counts ? p.gather.counts->rows : 0;
  std::string e = checkLayer("gather", p.gather, samples, grid);
  if (e.empty() && p.nextScatter.counts)
    e = checkLayer("next scatter", p.nextScatter, samples, grid);
  if (!e.empty())
    return e;
  if (samples < 1 || samples % grid.ranks() != 0)
    return std::to_string(samples) + " samples are not a positive multiple " +
           "of the " + std::to_string(grid.ranks()) +
           " ranks (NetMoE keeps I/J samples per rank)";
  int perNode = samples / grid.nodes, perRank = samples / grid.ranks();

  // Stage 1: whole samples to nodes (Eq. 10).
  std::vector<int64_t> inter = interNodeCost(p.gather, grid);
  if (p.nextScatter.counts)
    addInto(inter, interNodeCost(p.nextScatter, grid));
  std::vector<int> node;
  e = solveStage(p.form, inter, samples, grid.nodes, perNode, node);
  if (!e.empty())
    return "stage 1: " + e;

  // Stage 2: each node's samples to its ranks (Eq. 7).
  std::vector<int64_t> intra = intraNodeCost(p.gather, grid);
  if (p.nextScatter.counts)
    addInto(intra, intraNodeCost(p.nextScatter, grid));
  out.sampleRank.assign(samples, -1);
  out.interNodeTokens = 0;
  out.intraNodeTokens = 0;
  int width = grid.ranksPerNode, ranks = grid.ranks();
  for (int n = 0; n < grid.nodes; ++n) {
    std::vector<int> members;
    for (int i = 0; i < samples; ++i)
      if (node[i] == n)
        members.push_back(i);
    std::vector<int64_t> cost(members.size() * size_t(width));
    for (size_t k = 0; k < members.size(); ++k)
      for (int j = 0; j < width; ++j)
        cost[k * width + j] =
            intra[size_t(members[k]) * ranks + n * width + j];
    std::vector<int> local;
    e = solveStage(p.form, cost, int(members.size()), width, perRank, local);
    if (!e.empty())
      return "stage 2, node " + std::to_string(n) + ": " + e;
    for (size_t k = 0; k < members.size(); ++k) {
      int i = members[k], rank = n * width + local[k];
      out.sampleRank[i] = rank;
      out.interNodeTokens += inter[size_t(i) * grid.nodes + n];
      out.intraNodeTokens += intra[size_t(i) * ranks + rank];
    }
  }
  return "";
}

} // namespace planning
} // namespace moe_rt
