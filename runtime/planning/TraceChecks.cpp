//===- TraceChecks.cpp - the rules a routing trace keeps ------------------===//
//
// docs/routing-trace-format.md "Rules": each function here is one of them,
// worded as the error the reader and the writer report.
//
//===----------------------------------------------------------------------===//

#include "TraceChecks.h"

#include <string>

namespace moe_rt {
namespace planning {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

std::string checkRange(const char *what, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    return std::string(what) + " " + str(v) + " is outside [" + str(lo) +
           ", " + str(hi) + "]";
  return "";
}

} // namespace

const TraceBlock *TraceHeader::findBlock(int block) const {
  for (const TraceBlock &b : blocks)
    if (b.block == block)
      return &b;
  return nullptr;
}

std::string checkGrid(const Grid &g) {
  std::string e;
  if (!(e = checkRange("grid nodes", g.nodes, 1, kTraceMaxRanks)).empty() ||
      !(e = checkRange("grid ranks-per-node", g.ranksPerNode, 1,
                       kTraceMaxRanks)).empty())
    return e;
  if (int64_t(g.nodes) * g.ranksPerNode > kTraceMaxRanks)
    return "grid of " + str(int64_t(g.nodes) * g.ranksPerNode) +
           " ranks exceeds " + str(kTraceMaxRanks);
  return "";
}

std::string checkBatch(const TraceHeader &h) {
  std::string e;
  if (!(e = checkRange("batch samples", h.samples, 1, kTraceMaxSamples))
           .empty() ||
      !(e = checkRange("batch tokens", h.tokensPerSample, 1,
                       kTraceMaxTokens)).empty())
    return e;
  if (h.samples % h.grid.ranks() != 0)
    return "batch samples " + str(h.samples) + " is not a multiple of the " +
           str(h.grid.ranks()) + " ranks (each rank holds samples / ranks)";
  return "";
}

std::string checkBlockAt(const TraceHeader &h, size_t k) {
  if (k >= size_t(kTraceMaxBlocks))
    return "more than " + str(kTraceMaxBlocks) + " blocks";
  const TraceBlock &b = h.blocks[k];
  if (k > 0 && b.block <= h.blocks[k - 1].block)
    return "block " + str(b.block) + " declared after block " +
           str(h.blocks[k - 1].block) + " (blocks go in increasing order, " +
           "each once)";
  std::string name = "block " + str(b.block);
  if (b.block < 0)
    return name + ": a block index is >= 0";
  std::string e = checkRange("experts", b.experts, 1, kTraceMaxExperts);
  if (!e.empty())
    return name + ": " + e;
  if (b.routing == RoutingKind::TokenChoice &&
      (b.topK < 1 || b.topK > b.experts))
    return name + ": token-choice " + str(b.topK) +
           " must be between 1 and its " + str(b.experts) + " experts";
  if (static_cast<int64_t>(b.expertRank.size()) != b.experts)
    return name + ": " + str(b.expertRank.size()) + " expert-ranks for " +
           str(b.experts) + " experts";
  for (int e2 = 0; e2 < b.experts; ++e2)
    if (b.expertRank[e2] < 0 || b.expertRank[e2] >= h.grid.ranks())
      return name + ": expert " + str(e2) + " on rank " +
             str(b.expertRank[e2]) + ", the grid has ranks 0.." +
             str(h.grid.ranks() - 1);
  if (int64_t(h.samples) * b.experts > kTraceMaxCountsPerRecord)
    return name + ": " + str(h.samples) + " samples x " + str(b.experts) +
           " experts exceeds " + str(kTraceMaxCountsPerRecord) +
           " counts per record";
  return "";
}

std::string checkHeader(const TraceHeader &h) {
  std::string e;
  if (h.source.find('\n') != std::string::npos)
    return "source holds a line break";
  if (!(e = checkGrid(h.grid)).empty() || !(e = checkBatch(h)).empty())
    return e;
  if (h.blocks.empty())
    return "no block declared";
  for (size_t k = 0; k < h.blocks.size(); ++k)
    if (!(e = checkBlockAt(h, k)).empty())
      return e;
  return "";
}

std::string checkSampleRanks(const TraceHeader &h,
                             const std::vector<int> &ranks) {
  if (static_cast<int64_t>(ranks.size()) != h.samples)
    return "sample-ranks has " + str(ranks.size()) + " ranks for " +
           str(h.samples) + " samples";
  std::vector<int> held(h.grid.ranks(), 0);
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= h.grid.ranks())
      return "sample " + str(i) + " on rank " + str(ranks[i]) +
             ", the grid has ranks 0.." + str(h.grid.ranks() - 1);
    ++held[ranks[i]];
  }
  int perRank = h.samples / h.grid.ranks();
  for (int r = 0; r < h.grid.ranks(); ++r)
    if (held[r] != perRank)
      return "rank " + str(r) + " holds " + str(held[r]) +
             " samples, every rank holds samples / ranks = " + str(perRank);
  return "";
}

std::string checkCountRow(const TraceHeader &h, const TraceBlock &b,
                          int sample, const uint32_t *row) {
  uint64_t sum = 0;
  for (int e = 0; e < b.experts; ++e) {
    if (row[e] > uint32_t(h.tokensPerSample))
      return "sample " + str(sample) + " sends " + str(row[e]) +
             " tokens to expert " + str(e) + ", more than its " +
             str(h.tokensPerSample) + " tokens";
    sum += row[e];
  }
  if (b.routing == RoutingKind::TokenChoice &&
      sum != uint64_t(h.tokensPerSample) * uint64_t(b.topK))
    return "sample " + str(sample) + "'s counts sum to " + str(sum) +
           ", token choice routes tokens x top-k = " +
           str(int64_t(h.tokensPerSample) * b.topK);
  return "";
}

std::string checkRecord(const TraceHeader &h, const TraceRecord &r) {
  const TraceBlock *b = h.findBlock(r.block);
  if (!b)
    return "block " + str(r.block) + " is not declared in the header";
  if (r.step < 0 || r.micro < 0)
    return "step and micro are >= 0";
  std::string e = checkSampleRanks(h, r.sampleRank);
  if (!e.empty())
    return e;
  if (r.counts.rows != h.samples || r.counts.experts != b->experts ||
      r.counts.values.size() != size_t(h.samples) * size_t(b->experts))
    return "counts are " + str(r.counts.rows) + " x " +
           str(r.counts.experts) + ", expected samples x experts = " +
           str(h.samples) + " x " + str(b->experts);
  for (int i = 0; i < h.samples; ++i)
    if (!(e = checkCountRow(h, *b, i, r.counts.row(i))).empty())
      return e;
  return "";
}

std::string describeRecord(int64_t index, const TraceRecord &r) {
  return "record " + str(index) + " (step " + str(r.step) + ", micro " +
         str(r.micro) + ", block " + str(r.block) + ")";
}

std::string RecordSequence::accept(int64_t s, int m, int block) {
  if (s < 0 || m < 0)
    return "step and micro are >= 0";
  if (!header->findBlock(block))
    return "block " + str(block) + " is not declared in the header";
  const TraceBlock &due = header->blocks[nextBlock];
  if (nextBlock == 0) {
    if (s < step || (s == step && m <= micro))
      return "step " + str(s) + " micro " + str(m) + " after step " +
             str(step) + " micro " + str(micro) +
             " (records go by increasing step, then micro-batch)";
  } else if (s != step || m != micro) {
    return "step " + str(step) + " micro " + str(micro) + " has no record " +
           "of block " + str(due.block) + " (each step and micro-batch " +
           "records every declared block)";
  }
  if (block != due.block)
    return "block " + str(block) + " where block " + str(due.block) +
           " is due (the blocks of a step and micro-batch go in the " +
           "header's order, each once)";
  step = s;
  micro = m;
  nextBlock = (nextBlock + 1) % header->blocks.size();
  ++records;
  return "";
}

std::string RecordSequence::finish() const {
  if (nextBlock != 0)
    return "step " + str(step) + " micro " + str(micro) +
           " ends without a record of block " +
           str(header->blocks[nextBlock].block) +
           " (each step and micro-batch records every declared block)";
  return "";
}

} // namespace planning
} // namespace moe_rt
