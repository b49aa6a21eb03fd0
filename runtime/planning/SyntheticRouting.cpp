//===- SyntheticRouting.cpp - routing traces with skew and locality -------===//

#include "moe_rt/synthetic_routing.h"

#include <cmath>
#include <random>
#include <sstream>

namespace moe_rt {
namespace planning {

namespace {

/// mt19937_64 is specified bit for bit by the standard; the conversions
/// below are ours, so a seed gives the same trace everywhere.
class Rng {
public:
  explicit Rng(uint64_t seed) : engine(seed) {}
  double uniform() { return double(engine() >> 11) * 0x1.0p-53; } // [0, 1)
  uint64_t below(uint64_t n) { return uint64_t(uniform() * double(n)); }

private:
  std::mt19937_64 engine;
};

/// Walker's alias table: O(1) draws from a discrete distribution.
class AliasTable {
public:
  explicit AliasTable(const std::vector<double> &weights) {
    size_t n = weights.size();
    double sum = 0;
    for (double w : weights)
      sum += w;
    prob.assign(n, 1.0);
    alias.resize(n);
    std::vector<double> scaled(n);
    std::vector<size_t> small, large;
    for (size_t k = 0; k < n; ++k) {
      scaled[k] = weights[k] * double(n) / sum;
      alias[k] = k;
      (scaled[k] < 1.0 ? small : large).push_back(k);
    }
    while (!small.empty() && !large.empty()) {
      size_t s = small.back(), l = large.back();
      small.pop_back();
      prob[s] = scaled[s];
      alias[s] = l;
      scaled[l] -= 1.0 - scaled[s];
      if (scaled[l] < 1.0) {
        large.pop_back();
        small.push_back(l);
      }
    }
  }
  size_t draw(Rng &rng) const {
    size_t k = rng.below(prob.size());
    return rng.uniform() < prob[k] ? k : alias[k];
  }

private:
  std::vector<double> prob;
  std::vector<size_t> alias;
};

/// Per block: the Zipf popularity over a random permutation of the experts,
/// and each topic's routing distribution.
struct BlockModel {
  std::vector<double> popularity;
  std::vector<std::vector<double>> topicWeights;
  std::vector<AliasTable> topicTables;
};

/// Draws one expert from `weights` restricted to those not in picked[0..k):
/// the exact successive-sampling step, O(E), for when redrawing repeats
/// would take long (a distribution concentrated on fewer than K experts).
int drawExcluding(const std::vector<double> &weights, const int *picked,
                  int k, Rng &rng) {
  auto excluded = [&](size_t e) {
    for (int j = 0; j < k; ++j)
      if (picked[j] == int(e))
        return true;
    return false;
  };
  double sum = 0;
  for (size_t e = 0; e < weights.size(); ++e)
    if (!excluded(e))
      sum += weights[e];
  double u = rng.uniform() * sum;
  int last = -1;
  for (size_t e = 0; e < weights.size(); ++e) {
    if (excluded(e))
      continue;
    last = int(e);
    if ((u -= weights[e]) < 0)
      return int(e);
  }
  return last; // rounding left u >= 0: the last candidate
}

BlockModel makeBlock(const SyntheticRouting &c, Rng &rng) {
  BlockModel m;
  std::vector<int> perm(c.experts);
  for (int e = 0; e < c.experts; ++e)
    perm[e] = e;
  for (int e = c.experts - 1; e > 0; --e)
    std::swap(perm[e], perm[rng.below(uint64_t(e) + 1)]);
  m.popularity.assign(c.experts, 0.0);
  double sum = 0;
  for (int r = 0; r < c.experts; ++r)
    sum += m.popularity[perm[r]] = 1.0 / std::pow(double(r + 1), c.zipf);
  for (double &p : m.popularity)
    p /= sum;
  AliasTable byPopularity(m.popularity);
  for (int t = 0; t < c.topics; ++t) {
    // The topic's experts: distinct, drawn by popularity, so hot experts
    // are also the ones more topics prefer.
    std::vector<bool> chosen(c.experts, false);
    for (int k = 0; k < c.topicExperts;) {
      size_t e = byPopularity.draw(rng);
      if (!chosen[e]) {
        chosen[e] = true;
        ++k;
      }
    }
    std::vector<double> w(c.experts);
    for (int e = 0; e < c.experts; ++e)
      w[e] = (1 - c.locality) * m.popularity[e] +
             (chosen[e] ? c.locality / c.topicExperts : 0.0);
    m.topicTables.emplace_back(w);
    m.topicWeights.push_back(std::move(w));
  }
  return m;
}

std::string str(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

} // namespace

std::string checkSyntheticRouting(const SyntheticRouting &c) {
  auto bad = [](const std::string &what) { return what; };
  if (c.grid.nodes < 1 || c.grid.ranksPerNode < 1)
    return bad("the grid needs at least one node and one rank per node");
  if (c.samples < c.grid.ranks() || c.samples % c.grid.ranks())
    return bad("samples (" + std::to_string(c.samples) +
               ") must be a positive multiple of the " +
               std::to_string(c.grid.ranks()) + " ranks");
  if (c.tokens < 1 || c.experts < 1 || c.blocks < 1 || c.steps < 1 ||
      c.micro < 1)
    return bad("tokens, experts, blocks, steps and micro must be >= 1");
  if (c.topK < 1 || c.topK > c.experts)
    return bad("top-k must be between 1 and the experts");
  if (!(c.zipf >= 0 && c.zipf <= 16))
    return bad("zipf must be in [0, 16], got " + str(c.zipf));
  if (!(c.locality >= 0 && c.locality <= 1))
    return bad("locality must be in [0, 1], got " + str(c.locality));
  if (c.topics < 1 || c.topicExperts < 1 || c.topicExperts > c.experts)
    return bad("topics >= 1 and topic-experts between 1 and the experts");
  if (c.locality == 1 && c.topicExperts < c.topK)
    return bad("with locality 1 a token picks its top-k among the topic's "
               "experts: topic-experts must be >= top-k");
  if (c.expertRank.empty() && c.experts % c.grid.ranks())
    return bad("experts (" + std::to_string(c.experts) +
               ") must be a multiple of the ranks unless expert ranks are "
               "given");
  return checkHeader(syntheticHeader(c));
}

TraceHeader syntheticHeader(const SyntheticRouting &c) {
  TraceHeader h;
  std::ostringstream src;
  src << "synthetic seed " << c.seed << " zipf " << c.zipf << " locality "
      << c.locality << " topics " << c.topics << " topic-experts "
      << c.topicExperts;
  h.source = src.str();
  h.grid = c.grid;
  h.samples = c.samples;
  h.tokensPerSample = c.tokens;
  int ranks = c.grid.ranks();
  for (int b = 0; b < c.blocks; ++b) {
    TraceBlock blk;
    blk.block = b;
    blk.experts = c.experts;
    blk.topK = c.topK;
    blk.expertRank = c.expertRank;
    if (blk.expertRank.empty() && ranks > 0 && c.experts >= ranks)
      blk.expertRank = expertParallelPlacement(c.experts, ranks);
    h.blocks.push_back(std::move(blk));
  }
  return h;
}

std::string
generateSyntheticRouting(const SyntheticRouting &c,
                         const std::function<bool(const TraceRecord &)> &sink) {
  std::string e = checkSyntheticRouting(c);
  if (!e.empty())
    return e;
  Rng rng(c.seed);
  std::vector<BlockModel> model;
  for (int b = 0; b < c.blocks; ++b)
    model.push_back(makeBlock(c, rng));
  std::vector<int> placement = contiguousPlacement(c.samples, c.grid.ranks());
  std::vector<int> topic(c.samples);
  std::vector<int> picked(c.topK);
  TraceRecord r;
  for (int64_t step = 0; step < c.steps; ++step)
    for (int m = 0; m < c.micro; ++m) {
      for (int &t : topic)
        t = int(rng.below(uint64_t(c.topics)));
      for (int b = 0; b < c.blocks; ++b) {
        r.step = step;
        r.micro = m;
        r.block = b;
        r.sampleRank = placement;
        r.counts = CountMatrix(c.samples, c.experts);
        for (int i = 0; i < c.samples; ++i) {
          const AliasTable &table = model[b].topicTables[topic[i]];
          const std::vector<double> &weights =
              model[b].topicWeights[topic[i]];
          for (int tok = 0; tok < c.tokens; ++tok)
            // K distinct experts by successive sampling without
            // replacement: redraw a repeat, a few times, then draw
            // exactly from what is left.
            for (int k = 0, tries = 0; k < c.topK;) {
              int x = ++tries > 16 ? drawExcluding(weights, picked.data(), k, rng)
                                   : int(table.draw(rng));
              bool repeat = false;
              for (int j = 0; j < k; ++j)
                repeat |= picked[j] == x;
              if (repeat)
                continue;
              picked[k++] = x;
              tries = 0;
              ++r.counts.at(i, x);
            }
        }
        if (!sink(r))
          return "";
      }
    }
  return "";
}

} // namespace planning
} // namespace moe_rt
