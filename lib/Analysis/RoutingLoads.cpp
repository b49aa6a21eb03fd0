//===- RoutingLoads.cpp - recorded routing for the simulator --------------===//

#include "moe/Analysis/RoutingLoads.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::moe;
using namespace moe_rt::planning;

static llvm::Error traceError(const std::string &path, const llvm::Twine &why) {
  return llvm::createStringError("routing trace " + path + ": " + why);
}

llvm::Expected<std::unique_ptr<RoutingLoads>>
RoutingLoads::load(const std::string &path, std::optional<int64_t> step) {
  auto loads = std::make_unique<RoutingLoads>();
  loads->path = path;
  TraceReader reader;
  std::string error;
  if (!reader.open(path, error))
    return llvm::createStringError(error);
  loads->header = reader.header();
  TraceRecord r;
  TraceReader::Next next;
  bool found = false;
  while ((next = reader.next(r, error)) == TraceReader::Next::Record) {
    if (!found && (!step || r.step == *step)) {
      found = true;
      loads->chosenStep = r.step;
    }
    if (found && r.step == loads->chosenStep)
      loads->records[{r.micro, r.block}] = std::move(r);
  }
  if (next == TraceReader::Next::Error)
    return llvm::createStringError(error);
  if (!found)
    return step ? traceError(path, "has no step " + llvm::Twine(*step))
                : traceError(path, "has no records");
  return loads;
}

/// Rows sent from rank j to expert e: the counts of j's samples, capped at
/// the capacity.
static std::vector<int64_t> sourceExpertRows(const TraceRecord &r,
                                             int64_t ranks, int64_t experts,
                                             std::optional<int64_t> cap) {
  std::vector<int64_t> rows(ranks * experts, 0);
  for (int i = 0; i < r.counts.rows; ++i)
    for (int64_t e = 0; e < experts; ++e)
      rows[r.sampleRank[i] * experts + e] += r.counts.at(i, int(e));
  if (cap)
    for (int64_t &n : rows)
      n = std::min(n, *cap);
  return rows;
}

llvm::Expected<DispatchLoad>
RoutingLoads::loadOf(const DispatchShape &s) const {
  auto it = records.find({s.micro, s.block});
  if (it == records.end())
    return traceError(path, llvm::formatv("has no record of block {0}, "
                                          "micro-batch {1} in step {2}",
                                          s.block, s.micro, chosenStep));
  const TraceRecord &r = it->second;
  const TraceBlock *b = header.findBlock(r.block);
  int64_t ranks = header.grid.ranks();
  if (ranks != s.ranks)
    return traceError(path, llvm::formatv("was recorded on {0} ranks, the "
                                          "step's block {1} dispatch runs "
                                          "on {2}",
                                          ranks, s.block, s.ranks));
  if (header.samples != s.ranks * s.samplesPerRank ||
      header.tokensPerSample != s.tokens || b->experts != s.experts)
    return traceError(
        path, llvm::formatv("holds {0} samples of {1} tokens over {2} "
                            "experts per record, the step's block {3} "
                            "dispatch routes {4} x {5} samples of {6} tokens "
                            "over {7}",
                            header.samples, header.tokensPerSample,
                            b->experts, s.block, s.ranks, s.samplesPerRank,
                            s.tokens, s.experts));
  DispatchLoad load;
  load.sendIntra.assign(ranks, 0);
  load.sendInter.assign(ranks, 0);
  load.recvIntra.assign(ranks, 0);
  load.recvInter.assign(ranks, 0);
  load.expertRows.assign(ranks, 0);
  std::vector<int64_t> rows =
      sourceExpertRows(r, ranks, s.experts, s.capacity);
  for (int64_t j = 0; j < ranks; ++j)
    for (int64_t e = 0; e < s.experts; ++e) {
      int64_t n = rows[j * s.experts + e], q = b->expertRank[e];
      load.expertRows[q] += n;
      if (q == j)
        continue;
      bool sameNode = j / s.ranksPerNode == q / s.ranksPerNode;
      (sameNode ? load.sendIntra : load.sendInter)[j] += n;
      (sameNode ? load.recvIntra : load.recvInter)[q] += n;
    }
  return load;
}
