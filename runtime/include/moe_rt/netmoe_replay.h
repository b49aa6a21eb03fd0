/*===- netmoe_replay.h - NetMoE over a recorded routing ----------*- C++ -*-===*
 *
 * What NetMoE's placement does to one step's all-to-alls, given the
 * routing the gates produced (a trace's records): block by block, the
 * scatter leaves from where the samples are, the planner chooses where the
 * gather sends them (NetMoE Alg. 1 lines 8-14), and the next block's
 * scatter leaves from there. Without NetMoE every sample stays on its
 * data-loader rank. The NetMoE benchmark, moe-trace netmoe and the
 * trace-driven simulator (docs/load-aware.md) all replay through here.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_NETMOE_REPLAY_H
#define MOE_RT_NETMOE_REPLAY_H

#include "moe_rt/routing_predictor.h"
#include "moe_rt/routing_trace.h"
#include "moe_rt/sample_placement.h"

namespace moe_rt {
namespace planning {

/// Where the next block's counts come from when block l is planned.
enum class NextCounts {
  None,       ///< gather term only
  Transition, ///< NextBlockPredictor, learned from the earlier steps
  Oracle      ///< the true counts (an upper bound, not realisable)
};

/// One block of one (step, micro-batch).
struct BlockReplay {
  int block = 0;
  std::vector<int> scatterRank; ///< where samples are for this dispatch
  std::vector<int> gatherRank;  ///< where the gather sends them
  AllToAllVolume scatter, gather;
  /// Without NetMoE: both all-to-alls from / to the data-loader ranks.
  AllToAllVolume scatterBaseline, gatherBaseline;
  int movedSamples = 0, movedAcrossNodes = 0; ///< gatherRank vs scatterRank
  double solveSeconds = 0;
  /// Transition only: whether a prediction was made, and its error
  /// (predictionError) against the next block's true counts.
  bool predicted = false;
  double predictionError = 0;
};

class NetMoeReplay {
public:
  NetMoeReplay(const TraceHeader &header, NextCounts next,
               double decay = 0.5, AssignmentForm form =
                                       AssignmentForm::Transportation);

  /// Replays one (step, micro-batch): `group` holds its records, one per
  /// declared block, in order (as a trace stores them). Learns from the
  /// group afterwards (Transition), so a step is predicted from earlier
  /// steps only. Returns "" or what is wrong.
  std::string replay(const std::vector<TraceRecord> &group,
                     std::vector<BlockReplay> &out);

private:
  const TraceHeader &header;
  NextCounts next;
  AssignmentForm form;
  NextBlockPredictor predictor;
};

} // namespace planning
} // namespace moe_rt

#endif // MOE_RT_NETMOE_REPLAY_H
