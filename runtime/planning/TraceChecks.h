//===- TraceChecks.h - the rules a routing trace keeps ----------*- C++ -*-===//
//
// The checks shared by the trace reader and writer (one rule, one place):
// the reader applies the per-line ones as it reads, so an error names the
// offending line; checkRecord (routing_trace.h) applies them all to a
// whole record for the writer.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_PLANNING_TRACECHECKS_H
#define MOE_PLANNING_TRACECHECKS_H

#include "moe_rt/routing_trace.h"

namespace moe_rt {
namespace planning {

/// The header's parts, in the order a trace declares them (checkHeader
/// applies all three; the reader applies each after its line).
std::string checkGrid(const Grid &grid);
std::string checkBatch(const TraceHeader &header); // after checkGrid
/// header.blocks[k] on its own and after header.blocks[k - 1].
std::string checkBlockAt(const TraceHeader &header, size_t k);

/// "" when `ranks` (one per sample) are ranks of the grid and each rank
/// holds samples / ranks of them (NetMoE Eq. 5's balance: every placement
/// keeps I/J samples per rank).
std::string checkSampleRanks(const TraceHeader &header,
                             const std::vector<int> &ranks);

/// "" when the counts of sample `sample` (E values) are possible: no
/// expert gets more than the sample's L tokens, and under token choice
/// they sum to L x K (each token picks K distinct experts).
std::string checkCountRow(const TraceHeader &header, const TraceBlock &block,
                          int sample, const uint32_t *row);

/// The order every trace keeps: records by increasing (step, micro,
/// block), each (step, micro) holding every declared block once, in order.
class RecordSequence {
public:
  explicit RecordSequence(const TraceHeader &header) : header(&header) {}
  /// "" when a record of (step, micro, block) may come next, else why not.
  std::string accept(int64_t step, int micro, int block);
  /// "" when the records so far form complete groups.
  std::string finish() const;
  int64_t count() const { return records; }

private:
  const TraceHeader *header;
  int64_t records = 0;
  int64_t step = -1;
  int micro = -1;
  size_t nextBlock = 0; // index into header->blocks of the block due next
};

} // namespace planning
} // namespace moe_rt

#endif // MOE_PLANNING_TRACECHECKS_H
