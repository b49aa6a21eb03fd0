//===- ShardRowsPlan.h - expert sharding's variable-count layouts -*- C++ -*-===//
//
// moe_rt_gather_rows / moe_rt_scatter_rows (expert sharding on the
// variable-count path, docs/passes/moe-expert-sharding.md): the arithmetic
// both backends share, plain C++ (tests/ShardRowsPlanTest.cpp runs it on
// any machine). The expert side is E_l x R x M, local expert l's rows
// packed from row 0 then zeros; a rank's rows of expert l are its
// n[rank][l] = sum_g rows[l][g]. Gathered, expert l holds rank 0's run,
// then rank 1's, ...; on the wire each rank's runs are contiguous, expert
// by expert (an all-gather-v / reduce-scatter-v over rank-major parts).
// Functions returning std::string return "" or why the call is refused.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_SHARDROWSPLAN_H
#define MOE_RT_SRC_SHARDROWSPLAN_H

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace moe_rt::shardrows {

struct Shape {
  int64_t S = 1, rank = 0; ///< the node's group and this rank in it
  int64_t El = 0, G = 0;   ///< local experts; a rank's counts' columns
  int64_t R = 0, M = 0;    ///< the bound (rows per expert), the row width
  int64_t block = -1;      ///< the model block, for messages
};

/// The node's counts: `all` is S x E_l x G (each rank's rows tensor, in
/// rank order); n[g * E_l + l] = rank g's rows of local expert l. Refuses
/// a negative count and a local expert whose node total is over R.
inline std::string runs(const Shape &s, const int64_t *all,
                        std::vector<int64_t> &n) {
  n.assign(s.S * s.El, 0);
  for (int64_t g = 0; g < s.S; ++g)
    for (int64_t l = 0; l < s.El; ++l)
      for (int64_t c = 0; c < s.G; ++c) {
        int64_t v = all[(g * s.El + l) * s.G + c];
        if (v < 0)
          return "block " + std::to_string(s.block) + ": rank " +
                 std::to_string(g) + " of the group has a negative count " +
                 std::to_string(v) + " (local expert " + std::to_string(l) +
                 ", column " + std::to_string(c) + ")";
        n[g * s.El + l] += v;
      }
  for (int64_t l = 0; l < s.El; ++l) {
    int64_t total = 0;
    for (int64_t g = 0; g < s.S; ++g)
      total += n[g * s.El + l];
    if (total > s.R)
      return "block " + std::to_string(s.block) +
             ": the node's rows over the bound: local expert " +
             std::to_string(l) + " receives " + std::to_string(total) +
             " rows from the group's " + std::to_string(s.S) +
             " ranks, bound " + std::to_string(s.R) +
             " (raise it: moe-flowmoe-pipeline dropless-bound=N)";
  }
  return "";
}

/// Floats per rank on the wire and their offsets (prefix sums).
inline void wire(const Shape &s, const std::vector<int64_t> &n,
                 std::vector<int64_t> &count, std::vector<int64_t> &offset) {
  count.assign(s.S, 0);
  offset.assign(s.S, 0);
  for (int64_t g = 0; g < s.S; ++g) {
    for (int64_t l = 0; l < s.El; ++l)
      count[g] += n[g * s.El + l] * s.M;
    if (g > 0)
      offset[g] = offset[g - 1] + count[g - 1];
  }
}

/// Row where rank g's run of expert l starts in the gathered layout.
inline int64_t gatheredStart(const Shape &s, const std::vector<int64_t> &n,
                             int64_t g, int64_t l) {
  int64_t start = 0;
  for (int64_t h = 0; h < g; ++h)
    start += n[h * s.El + l];
  return start;
}

/// Copies between the expert side (E_l x R x M; rank g's runs, own layout
/// when `gathered` is false, else at gatheredStart) and rank g's wire part
/// (`part`): toWire packs, !toWire unpacks.
inline void copyRuns(const Shape &s, const std::vector<int64_t> &n, int64_t g,
                     bool gathered, bool toWire, float *side, float *part) {
  int64_t at = 0;
  for (int64_t l = 0; l < s.El; ++l) {
    int64_t rows = n[g * s.El + l];
    int64_t first = gathered ? gatheredStart(s, n, g, l) : 0;
    float *e = side + (l * s.R + first) * s.M;
    if (rows > 0) {
      if (toWire)
        std::memcpy(part + at, e, size_t(rows * s.M) * sizeof(float));
      else
        std::memcpy(e, part + at, size_t(rows * s.M) * sizeof(float));
    }
    at += rows * s.M;
  }
}

/// Zeroes every expert's rows past its filled ones (`filled[l]`).
inline void zeroTail(const Shape &s, const std::vector<int64_t> &filled,
                     float *side) {
  for (int64_t l = 0; l < s.El; ++l)
    std::fill(side + (l * s.R + filled[l]) * s.M, side + (l + 1) * s.R * s.M,
              0.0f);
}

/// Filled rows per expert: the node's (gathered) or this rank's.
inline std::vector<int64_t> filled(const Shape &s,
                                   const std::vector<int64_t> &n,
                                   bool gathered) {
  std::vector<int64_t> f(s.El, 0);
  for (int64_t l = 0; l < s.El; ++l)
    for (int64_t g = 0; g < s.S; ++g)
      if (gathered || g == s.rank)
        f[l] += n[g * s.El + l];
  return f;
}

/// The gathered counts E_l x S·G from the exchanged S x E_l x G.
inline void gatheredRows(const Shape &s, const int64_t *all, int64_t *out) {
  for (int64_t l = 0; l < s.El; ++l)
    for (int64_t g = 0; g < s.S; ++g)
      for (int64_t c = 0; c < s.G; ++c)
        out[(l * s.S + g) * s.G + c] = all[(g * s.El + l) * s.G + c];
}

/// This rank's E_l x G block of gathered counts E_l x S·G.
inline void ownRows(const Shape &s, const int64_t *gathered, int64_t *mine) {
  for (int64_t l = 0; l < s.El; ++l)
    for (int64_t c = 0; c < s.G; ++c)
      mine[l * s.G + c] = gathered[(l * s.S + s.rank) * s.G + c];
}

/// Whether gathered counts (an operand) are what the group exchanged:
/// "" or the first entry that differs.
inline std::string sameCounts(const Shape &s, const int64_t *gathered,
                              const int64_t *all) {
  for (int64_t l = 0; l < s.El; ++l)
    for (int64_t g = 0; g < s.S; ++g)
      for (int64_t c = 0; c < s.G; ++c) {
        int64_t have = gathered[(l * s.S + g) * s.G + c],
                sent = all[(g * s.El + l) * s.G + c];
        if (have != sent)
          return "block " + std::to_string(s.block) +
                 ": the gathered counts do not match the group's: entry [" +
                 std::to_string(l) + "][" + std::to_string(g * s.G + c) +
                 "] is " + std::to_string(have) + ", rank " +
                 std::to_string(g) + " has " + std::to_string(sent);
      }
  return "";
}

} // namespace moe_rt::shardrows

#endif // MOE_RT_SRC_SHARDROWSPLAN_H
