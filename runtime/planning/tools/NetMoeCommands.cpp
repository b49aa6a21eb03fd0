//===- NetMoeCommands.cpp - moe-trace netmoe and time-solve ---------------===//
//
// The NetMoE benchmark's driver (bench/netmoe.py): `netmoe` replays the
// planner over a trace and totals the all-to-all volumes with and without
// it; `time-solve` times the two-stage solve, the transportation form and
// the paper's expanded form interleaved, and checks they agree.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "moe_rt/netmoe_replay.h"
#include "moe_rt/synthetic_routing.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

using namespace moe_rt::planning;

namespace moe_trace {

namespace {

struct Totals {
  AllToAllVolume scatter, gather, scatterBase, gatherBase;
  int64_t blocks = 0, samples = 0, moved = 0, movedAcross = 0;
  int64_t predictions = 0;
  double predictionError = 0;
  std::vector<double> solveMs;

  void add(const BlockReplay &b, int sampleCount) {
    scatter += b.scatter;
    gather += b.gather;
    scatterBase += b.scatterBaseline;
    gatherBase += b.gatherBaseline;
    ++blocks;
    samples += sampleCount;
    moved += b.movedSamples;
    movedAcross += b.movedAcrossNodes;
    if (b.predicted) {
      ++predictions;
      predictionError += b.predictionError;
    }
    solveMs.push_back(b.solveSeconds * 1e3);
  }
};

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double maxOf(const std::vector<double> &v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

void printVolume(const char *name, const AllToAllVolume &v, int64_t blocks) {
  double n = blocks ? double(blocks) : 1.0;
  std::printf("\"%s\": {\"local\": %.3f, \"intra_node\": %.3f, "
              "\"inter_node\": %.3f}",
              name, v.local / n, v.intraNode / n, v.interNode / n);
}

double change(uint64_t with, uint64_t without) {
  return without ? 100.0 * (double(with) - double(without)) / double(without)
                 : 0.0;
}

} // namespace

int runNetMoe(const std::vector<std::string> &args) {
  Options o;
  std::string error;
  if (!o.parse(args, {"predictor", "decay"}, {"json"}, error))
    return fail("netmoe", error);
  std::string which = o.text("predictor", "transition");
  NextCounts next;
  if (which == "none")
    next = NextCounts::None;
  else if (which == "transition")
    next = NextCounts::Transition;
  else if (which == "oracle")
    next = NextCounts::Oracle;
  else
    return fail("netmoe", "--predictor '" + which +
                              "' is none, transition or oracle");
  double decay;
  if (!o.number("decay", 1e-9, 1, 0.5, decay, error))
    return fail("netmoe", error);
  if (o.positional.size() != 1)
    return fail("netmoe", "expects one trace file");
  TraceReader reader;
  if (!reader.open(o.positional[0], error))
    return fail("netmoe", error);
  const TraceHeader &h = reader.header();
  NetMoeReplay replay(h, next, decay);
  Totals t;
  int64_t groups = 0;
  std::vector<TraceRecord> group;
  std::vector<BlockReplay> blocks;
  TraceRecord r;
  TraceReader::Next n;
  while ((n = reader.next(r, error)) == TraceReader::Next::Record) {
    group.push_back(std::move(r));
    r = TraceRecord();
    if (group.size() < h.blocks.size())
      continue;
    if (!(error = replay.replay(group, blocks)).empty())
      return fail("netmoe", o.positional[0] + ": step " +
                                std::to_string(group[0].step) + ": " + error);
    for (const BlockReplay &b : blocks)
      t.add(b, h.samples);
    ++groups;
    group.clear();
  }
  if (n == TraceReader::Next::Error)
    return fail("netmoe", error);

  AllToAllVolume both = t.scatter, bothBase = t.scatterBase;
  both += t.gather;
  bothBase += t.gatherBase;
  double movedAll = t.samples ? 100.0 * t.moved / t.samples : 0;
  double movedAcross = t.samples ? 100.0 * t.movedAcross / t.samples : 0;
  double predErr = t.predictions ? t.predictionError / t.predictions : 0;
  if (o.has("json")) {
    std::printf("{\"trace\": \"%s\", \"predictor\": \"%s\", \"groups\": %lld, "
                "\"blocks\": %lld, \"per_block\": {",
                o.positional[0].c_str(), which.c_str(), (long long)groups,
                (long long)t.blocks);
    printVolume("scatter", t.scatter, t.blocks);
    std::printf(", ");
    printVolume("gather", t.gather, t.blocks);
    std::printf(", ");
    printVolume("scatter_baseline", t.scatterBase, t.blocks);
    std::printf(", ");
    printVolume("gather_baseline", t.gatherBase, t.blocks);
    std::printf("}, \"moved_across_nodes_pct\": %.4f, \"moved_pct\": %.4f, "
                "\"predictions\": %lld, \"prediction_error\": %.6f, "
                "\"solve_ms_median\": %.6f, \"solve_ms_max\": %.6f}\n",
                movedAcross, movedAll, (long long)t.predictions, predErr,
                median(t.solveMs), maxOf(t.solveMs));
    return 0;
  }
  double nb = t.blocks ? double(t.blocks) : 1.0;
  std::printf("NetMoE replay of %s: %lld steps x micro-batches, %zu blocks, "
              "next-block counts: %s\n",
              o.positional[0].c_str(), (long long)groups, h.blocks.size(),
              which.c_str());
  std::printf("  tokens per block and all-to-all    w/o NetMoE    w/ NetMoE   "
              "change\n");
  auto row = [&](const char *name, uint64_t with, uint64_t without) {
    std::printf("  %-34s %10.1f %12.1f %+8.2f%%\n", name, without / nb,
                with / nb, change(with, without));
  };
  row("scatter inter-node", t.scatter.interNode, t.scatterBase.interNode);
  row("scatter intra-node", t.scatter.intraNode, t.scatterBase.intraNode);
  row("gather inter-node", t.gather.interNode, t.gatherBase.interNode);
  row("gather intra-node", t.gather.intraNode, t.gatherBase.intraNode);
  row("both inter-node", both.interNode, bothBase.interNode);
  row("both intra-node", both.intraNode, bothBase.intraNode);
  std::printf("  samples moved by the gathers: %.2f%% across nodes, %.2f%% "
              "in all\n",
              movedAcross, movedAll);
  if (next == NextCounts::Transition)
    std::printf("  next-block prediction error (sum |pred - true| / sum "
                "true): %.4f over %lld predictions\n",
                predErr, (long long)t.predictions);
  std::printf("  solve time per block: median %.3f ms, max %.3f ms\n",
              median(t.solveMs), maxOf(t.solveMs));
  return 0;
}

int runTimeSolve(const std::vector<std::string> &args) {
  Options o;
  std::string error;
  if (!o.parse(args,
               {"samples", "nodes", "ranks-per-node", "experts", "tokens",
                "top-k", "reps", "locality", "zipf", "seed"},
               {"expanded"}, error))
    return fail("time-solve", error);
  int64_t samples, nodes, rpn, experts, tokens, topK, reps, seed;
  double locality, zipf;
  bool ok = o.integer("samples", 1, kTraceMaxSamples, 1024, samples, error) &&
            o.integer("nodes", 1, kTraceMaxRanks, 4, nodes, error) &&
            o.integer("ranks-per-node", 1, kTraceMaxRanks, 8, rpn, error) &&
            o.integer("experts", 1, kTraceMaxExperts, 64, experts, error) &&
            o.integer("tokens", 1, kTraceMaxTokens, 1024, tokens, error) &&
            o.integer("top-k", 1, kTraceMaxExperts, 2, topK, error) &&
            o.integer("reps", 1, 100000, 15, reps, error) &&
            o.integer("seed", 0, INT64_MAX, 1, seed, error) &&
            o.number("locality", 0, 1, 0.5, locality, error) &&
            o.number("zipf", 0, 16, 1.0, zipf, error);
  if (!ok)
    return fail("time-solve", error);
  if (!o.positional.empty())
    return fail("time-solve", "takes no positional argument");
  SyntheticRouting c;
  c.grid = Grid{int(nodes), int(rpn)};
  c.samples = int(samples);
  c.tokens = int(tokens);
  c.experts = int(experts);
  c.topK = int(topK);
  c.blocks = 2; // a gather and the next block's scatter
  c.locality = locality;
  c.zipf = zipf;
  c.seed = uint64_t(seed);
  std::vector<TraceRecord> group;
  error = generateSyntheticRouting(c, [&](const TraceRecord &r) {
    group.push_back(r);
    return true;
  });
  if (!error.empty())
    return fail("time-solve", error);
  TraceHeader h = syntheticHeader(c);
  SamplePlacementProblem p;
  p.grid = c.grid;
  p.gather = {&group[0].counts, &h.blocks[0].expertRank};
  p.nextScatter = {&group[1].counts, &h.blocks[1].expertRank};
  bool expanded = o.has("expanded");
  std::vector<double> transport, square;
  SamplePlacement a, b;
  for (int64_t k = 0; k < reps; ++k) {
    // Interleaved, so both forms see the same machine load.
    p.form = AssignmentForm::Transportation;
    auto t0 = std::chrono::steady_clock::now();
    if (!(error = planSamplePlacement(p, a)).empty())
      return fail("time-solve", error);
    auto t1 = std::chrono::steady_clock::now();
    transport.push_back(std::chrono::duration<double, std::milli>(t1 - t0)
                            .count());
    if (!expanded)
      continue;
    p.form = AssignmentForm::Expanded;
    t0 = std::chrono::steady_clock::now();
    if (!(error = planSamplePlacement(p, b)).empty())
      return fail("time-solve", error);
    t1 = std::chrono::steady_clock::now();
    square.push_back(std::chrono::duration<double, std::milli>(t1 - t0)
                         .count());
    // Stage 1's optimum is unique in value; when it has several solutions
    // the forms may pick different ones, and stage 2 then works within
    // different node assignments, so only stage 1 must agree.
    if (a.interNodeTokens != b.interNodeTokens)
      return fail("time-solve", "the two forms disagree on stage 1: " +
                                    std::to_string(a.interNodeTokens) +
                                    " vs " +
                                    std::to_string(b.interNodeTokens) +
                                    " inter-node tokens");
  }
  std::printf("{\"samples\": %lld, \"nodes\": %lld, \"ranks_per_node\": %lld, "
              "\"experts\": %lld, \"reps\": %lld, \"transport_ms_median\": "
              "%.6f, \"transport_ms_max\": %.6f",
              (long long)samples, (long long)nodes, (long long)rpn,
              (long long)experts, (long long)reps, median(transport),
              maxOf(transport));
  if (expanded)
    std::printf(", \"expanded_ms_median\": %.6f, \"expanded_ms_max\": %.6f",
                median(square), maxOf(square));
  std::printf(", \"inter_node_tokens\": %lld, \"intra_node_tokens\": %lld}\n",
              (long long)a.interNodeTokens, (long long)a.intraNodeTokens);
  return 0;
}

} // namespace moe_trace
