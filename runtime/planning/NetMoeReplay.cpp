//===- NetMoeReplay.cpp - NetMoE over a recorded routing ------------------===//

#include "moe_rt/netmoe_replay.h"

#include <chrono>

namespace moe_rt {
namespace planning {

NetMoeReplay::NetMoeReplay(const TraceHeader &header, NextCounts next,
                           double decay, AssignmentForm form)
    : header(header), next(next), form(form), predictor(decay) {}

std::string NetMoeReplay::replay(const std::vector<TraceRecord> &group,
                                 std::vector<BlockReplay> &out) {
  if (group.size() != header.blocks.size())
    return "a step and micro-batch has " + std::to_string(group.size()) +
           " records, the trace declares " +
           std::to_string(header.blocks.size()) + " blocks";
  for (size_t k = 0; k < group.size(); ++k)
    if (group[k].block != header.blocks[k].block)
      return "record " + std::to_string(k) + " of the group is block " +
             std::to_string(group[k].block) + ", expected block " +
             std::to_string(header.blocks[k].block);
  const Grid &grid = header.grid;
  // The data loader's placement: where the first block's dispatch finds
  // the samples (later records may show a placement already planned).
  const std::vector<int> &home = group[0].sampleRank;
  std::vector<int> where = home;
  out.assign(group.size(), BlockReplay());
  for (size_t l = 0; l < group.size(); ++l) {
    const TraceBlock &blk = header.blocks[l];
    const CountMatrix &counts = group[l].counts;
    BlockReplay &b = out[l];
    b.block = blk.block;
    b.scatterRank = where;
    b.scatter = allToAllVolume(counts, where, blk.expertRank, grid);
    b.scatterBaseline = allToAllVolume(counts, home, blk.expertRank, grid);
    b.gatherBaseline = b.scatterBaseline;

    SamplePlacementProblem problem;
    problem.grid = grid;
    problem.form = form;
    problem.gather = {&counts, &blk.expertRank};
    CountMatrix predicted;
    bool last = l + 1 == group.size();
    if (!last) {
      const TraceBlock &nextBlk = header.blocks[l + 1];
      const CountMatrix &truth = group[l + 1].counts;
      uint64_t rowSum =
          uint64_t(header.tokensPerSample) * uint64_t(nextBlk.topK);
      if (next == NextCounts::Oracle) {
        problem.nextScatter = {&truth, &nextBlk.expertRank};
      } else if (next == NextCounts::Transition &&
                 nextBlk.routing == RoutingKind::TokenChoice &&
                 predictor.predict(blk.block, counts, rowSum, predicted)) {
        problem.nextScatter = {&predicted, &nextBlk.expertRank};
        b.predicted = true;
        b.predictionError = predictionError(predicted, truth);
      }
    }
    SamplePlacement placement;
    auto start = std::chrono::steady_clock::now();
    std::string e = planSamplePlacement(problem, placement);
    b.solveSeconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    if (!e.empty())
      return "block " + std::to_string(blk.block) + ": " + e;
    b.gatherRank = placement.sampleRank;
    b.gather = allToAllVolume(counts, b.gatherRank, blk.expertRank, grid);
    for (size_t i = 0; i < where.size(); ++i) {
      b.movedSamples += b.gatherRank[i] != where[i];
      b.movedAcrossNodes +=
          grid.nodeOf(b.gatherRank[i]) != grid.nodeOf(where[i]);
    }
    where = b.gatherRank;
  }
  if (next == NextCounts::Transition)
    for (size_t l = 0; l + 1 < group.size(); ++l)
      predictor.observe(group[l].block, group[l].counts, group[l + 1].counts);
  return "";
}

} // namespace planning
} // namespace moe_rt
