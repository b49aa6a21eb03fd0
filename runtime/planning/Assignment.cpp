//===- Assignment.cpp - balanced assignments by min-cost flow -------------===//
//
// NetMoE's stages are balanced assignments (Eq. 10): items (samples) to
// bins (nodes or ranks) of fixed capacity. The paper duplicates each bin
// `capacity` times and runs Kuhn-Munkres on the square graph; a min-cost
// flow on the transportation network items -> bins has the same optimum
// (both are the same integral linear program: the constraint matrix is
// totally unimodular) and only items x bins arcs. LEMON's network simplex
// solves both exactly (docs/netmoe-reproduction.md "Solver").
//
//===----------------------------------------------------------------------===//

#include "moe_rt/sample_placement.h"

#include <lemon/network_simplex.h>
#include <lemon/smart_graph.h>

namespace moe_rt {
namespace planning {

namespace {

using Graph = lemon::SmartDigraph;
using Simplex = lemon::NetworkSimplex<Graph, int64_t, int64_t>;

std::string checkArguments(const std::vector<int64_t> &cost, int items,
                           int bins, const std::vector<int> &capacity) {
  if (items < 0 || bins < 1)
    return "an assignment needs items >= 0 and bins >= 1";
  if (cost.size() != size_t(items) * size_t(bins))
    return "cost holds " + std::to_string(cost.size()) +
           " values, expected items x bins = " +
           std::to_string(int64_t(items) * bins);
  if (capacity.size() != size_t(bins))
    return "capacity holds " + std::to_string(capacity.size()) +
           " values for " + std::to_string(bins) + " bins";
  int64_t total = 0;
  for (int c : capacity) {
    if (c < 0)
      return "a bin capacity is negative";
    total += c;
  }
  if (total != items)
    return "the bins hold " + std::to_string(total) + " items in all, not " +
           std::to_string(items);
  return "";
}

/// Min-cost flow from `items` unit sources to sinks of the given demands
/// over arcs item -> column; column(c) maps a flow column to its bin.
/// `arcCost(i, c)` prices an arc.
template <typename ArcCost, typename BinOf>
std::string solveFlow(int items, int columns, const std::vector<int> &demand,
                      ArcCost arcCost, BinOf binOf,
                      std::vector<int> &assignment) {
  Graph g;
  g.reserveNode(items + columns);
  g.reserveArc(int64_t(items) * columns);
  std::vector<Graph::Node> itemNode(items), columnNode(columns);
  for (int i = 0; i < items; ++i)
    itemNode[i] = g.addNode();
  for (int c = 0; c < columns; ++c)
    columnNode[c] = g.addNode();
  Graph::ArcMap<int64_t> cost(g);
  Graph::NodeMap<int64_t> supply(g);
  for (int i = 0; i < items; ++i) {
    supply[itemNode[i]] = 1;
    for (int c = 0; c < columns; ++c)
      cost[g.addArc(itemNode[i], columnNode[c])] = arcCost(i, c);
  }
  for (int c = 0; c < columns; ++c)
    supply[columnNode[c]] = -demand[c];
  Simplex simplex(g);
  simplex.costMap(cost).supplyMap(supply);
  if (simplex.run() != Simplex::OPTIMAL)
    return "the min-cost flow found no optimal assignment"; // balanced: cannot happen
  assignment.assign(items, -1);
  // Arcs were added item-major, so arc id = i * columns + c.
  for (Graph::ArcIt a(g); a != lemon::INVALID; ++a)
    if (simplex.flow(a) > 0) {
      int id = g.id(a);
      assignment[id / columns] = binOf(id % columns);
    }
  for (int i = 0; i < items; ++i)
    if (assignment[i] < 0)
      return "the min-cost flow left item " + std::to_string(i) +
             " unassigned";
  return "";
}

/// Checks the arguments, then solves on the transportation network or on
/// the paper's expanded graph.
std::string solve(const std::vector<int64_t> &cost, int items, int bins,
                  const std::vector<int> &capacity, bool expanded,
                  std::vector<int> &assignment) {
  std::string e = checkArguments(cost, items, bins, capacity);
  if (!e.empty())
    return e;
  if (!expanded)
    return solveFlow(
        items, bins, capacity,
        [&](int i, int b) { return cost[size_t(i) * bins + b]; },
        [](int b) { return b; }, assignment);
  // Slot s is a copy of bin slotBin[s] (the paper's Q: node n duplicated
  // B = I/N times, slot s standing for node floor(s / B)).
  std::vector<int> slotBin;
  slotBin.reserve(items);
  for (int b = 0; b < bins; ++b)
    slotBin.insert(slotBin.end(), capacity[b], b);
  return solveFlow(
      items, items, std::vector<int>(items, 1),
      [&](int i, int s) { return cost[size_t(i) * bins + slotBin[s]]; },
      [&](int s) { return slotBin[s]; }, assignment);
}

} // namespace

std::string solveBalancedAssignment(const std::vector<int64_t> &cost,
                                    int items, int bins,
                                    const std::vector<int> &capacity,
                                    std::vector<int> &assignment) {
  return solve(cost, items, bins, capacity, false, assignment);
}

std::string solveExpandedAssignment(const std::vector<int64_t> &cost,
                                    int items, int bins,
                                    const std::vector<int> &capacity,
                                    std::vector<int> &assignment) {
  return solve(cost, items, bins, capacity, true, assignment);
}

} // namespace planning
} // namespace moe_rt
