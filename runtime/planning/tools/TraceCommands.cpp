//===- TraceCommands.cpp - moe-trace check, stats and synth ---------------===//

#include "Commands.h"

#include "moe_rt/routing_trace.h"
#include "moe_rt/synthetic_routing.h"

#include <algorithm>
#include <cstdio>

using namespace moe_rt::planning;

namespace moe_trace {

namespace {

/// Opens the one positional FILE of `command`.
bool openTrace(const std::string &command, const Options &o,
               TraceReader &reader, int &status) {
  if (o.positional.size() != 1) {
    status = fail(command, "expects one trace file");
    return false;
  }
  std::string error;
  if (!reader.open(o.positional[0], error)) {
    status = fail(command, error);
    return false;
  }
  return true;
}

} // namespace

int runCheck(const std::vector<std::string> &args) {
  Options o;
  std::string error;
  if (!o.parse(args, {}, {}, error))
    return fail("check", error);
  TraceReader reader;
  int status = 0;
  if (!openTrace("check", o, reader, status))
    return status;
  const TraceHeader &h = reader.header();
  TraceRecord r;
  int64_t records = 0, firstStep = -1, lastStep = -1, micro = 0;
  TraceReader::Next n;
  while ((n = reader.next(r, error)) == TraceReader::Next::Record) {
    if (firstStep < 0)
      firstStep = r.step;
    lastStep = r.step;
    micro = std::max<int64_t>(micro, r.micro + 1);
    ++records;
  }
  if (n == TraceReader::Next::Error)
    return fail("check", error);
  std::printf("%s: routing trace version %d, %lld records", o.positional[0].c_str(),
              kTraceVersion, (long long)records);
  if (records)
    std::printf(" (steps %lld..%lld, %lld micro-batch%s)", (long long)firstStep,
                (long long)lastStep, (long long)micro, micro == 1 ? "" : "es");
  std::printf("\n  grid %d nodes x %d ranks, %d samples x %d tokens, %zu MoE "
              "blocks\n",
              h.grid.nodes, h.grid.ranksPerNode, h.samples, h.tokensPerSample,
              h.blocks.size());
  if (!h.source.empty())
    std::printf("  source: %s\n", h.source.c_str());
  return 0;
}

int runStats(const std::vector<std::string> &args) {
  Options o;
  std::string error;
  if (!o.parse(args, {}, {"json"}, error))
    return fail("stats", error);
  TraceReader reader;
  int status = 0;
  if (!openTrace("stats", o, reader, status))
    return status;
  const TraceHeader &h = reader.header();
  bool json = o.has("json");
  TraceRecord r;
  TraceReader::Next n;
  if (json)
    std::printf("[");
  bool first = true;
  while ((n = reader.next(r, error)) == TraceReader::Next::Record) {
    const TraceBlock &b = *h.findBlock(r.block);
    LoadBalance lb = loadBalance(r.counts, b.expertRank, h.grid.ranks());
    AllToAllVolume v =
        allToAllVolume(r.counts, r.sampleRank, b.expertRank, h.grid);
    if (json) {
      std::printf("%s\n {\"step\": %lld, \"micro\": %d, \"block\": %d, "
                  "\"rank_max_over_mean\": %.6g, \"expert_max_over_mean\": "
                  "%.6g, \"local\": %llu, \"intra_node\": %llu, "
                  "\"inter_node\": %llu}",
                  first ? "" : ",", (long long)r.step, r.micro, r.block,
                  lb.rankRatio(), lb.expertRatio(),
                  (unsigned long long)v.local,
                  (unsigned long long)v.intraNode,
                  (unsigned long long)v.interNode);
    } else {
      std::printf("step %lld micro %d block %d: tokens per rank max/mean "
                  "%.3f, per expert max/mean %.3f; all-to-all tokens local "
                  "%llu, intra-node %llu, inter-node %llu\n",
                  (long long)r.step, r.micro, r.block, lb.rankRatio(),
                  lb.expertRatio(), (unsigned long long)v.local,
                  (unsigned long long)v.intraNode,
                  (unsigned long long)v.interNode);
    }
    first = false;
  }
  if (json)
    std::printf("\n]\n");
  if (n == TraceReader::Next::Error)
    return fail("stats", error);
  return 0;
}

int runSynth(const std::vector<std::string> &args) {
  Options o;
  std::string error;
  if (!o.parse(args,
               {"o", "nodes", "ranks-per-node", "samples-per-rank", "tokens",
                "experts", "top-k", "blocks", "steps", "micro", "zipf",
                "locality", "topics", "topic-experts", "seed"},
               {}, error))
    return fail("synth", error);
  if (!o.has("o") || !o.positional.empty())
    return fail("synth", "expects -o FILE and no positional argument");
  SyntheticRouting c;
  int64_t nodes, rpn, perRank, tokens, experts, topK, blocks, steps, micro,
      topics, topicExperts, seed;
  double zipf, locality;
  bool ok =
      o.integer("nodes", 1, kTraceMaxRanks, 2, nodes, error) &&
      o.integer("ranks-per-node", 1, kTraceMaxRanks, 4, rpn, error) &&
      o.integer("samples-per-rank", 1, kTraceMaxSamples, 4, perRank, error) &&
      o.integer("tokens", 1, kTraceMaxTokens, 128, tokens, error) &&
      o.integer("experts", 1, kTraceMaxExperts, 16, experts, error) &&
      o.integer("top-k", 1, kTraceMaxExperts, 2, topK, error) &&
      o.integer("blocks", 1, kTraceMaxBlocks, 2, blocks, error) &&
      o.integer("steps", 1, int64_t(1) << 40, 1, steps, error) &&
      o.integer("micro", 1, 1 << 20, 1, micro, error) &&
      o.integer("topics", 1, 1 << 20, 16, topics, error) &&
      o.integer("topic-experts", 1, kTraceMaxExperts, 2, topicExperts,
                error) &&
      o.integer("seed", 0, INT64_MAX, 1, seed, error) &&
      o.number("zipf", 0, 16, 1.0, zipf, error) &&
      o.number("locality", 0, 1, 0.5, locality, error);
  if (!ok)
    return fail("synth", error);
  if (nodes * rpn > kTraceMaxRanks || nodes * rpn * perRank > kTraceMaxSamples)
    return fail("synth", "the grid or the batch is larger than a trace holds");
  c.grid.nodes = int(nodes);
  c.grid.ranksPerNode = int(rpn);
  c.samples = int(nodes * rpn * perRank);
  c.tokens = int(tokens);
  c.experts = int(experts);
  c.topK = int(topK);
  c.blocks = int(blocks);
  c.steps = steps;
  c.micro = int(micro);
  c.topics = int(topics);
  c.topicExperts = int(topicExperts);
  c.seed = uint64_t(seed);
  c.zipf = zipf;
  c.locality = locality;
  if (!(error = checkSyntheticRouting(c)).empty())
    return fail("synth", error);
  TraceWriter writer;
  if (!writer.open(o.text("o", "-"), syntheticHeader(c), error))
    return fail("synth", error);
  std::string writeError;
  error = generateSyntheticRouting(c, [&](const TraceRecord &r) {
    return writer.write(r, writeError);
  });
  if (!error.empty())
    return fail("synth", error);
  if (!writeError.empty() || !writer.close(error))
    return fail("synth", writeError.empty() ? error : writeError);
  return 0;
}

} // namespace moe_trace
