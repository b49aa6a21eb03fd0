//===- Placement.h - where a placing combine's rows go ----------*- C++ -*-===//
//
// NetMoE's placing gather (docs/netmoe-in-the-step.md): the variable-count
// combine sends every expert output row straight to its sample's *new*
// rank, place[s] for sample s = g·B + b (sample b of group rank g before
// the combine), and there the rank's new samples sit in increasing s. No
// rank holds the routing of another, so every rank rebuilds the whole
// exchange from the group's indices (all-gathered: G·T·k integers, small
// next to the rows) and the placement (the same on every rank):
//
//   a choice (g, t, j) (token t of rank g, its j-th expert e) lives, after
//   the dispatch, on rank e / E_l as row p of local expert l = e % E_l,
//   p = sum over g' < g of g''s rows for e, plus its GShard rank among
//   g's rows for e (kernels/VarRouting.h's layout);
//   the combine sends it to rank place[g·B + t / N], token slot
//   local(s)·N + t % N.
//
// Both sides enumerate choices in (g, t, j) order, so a sender's rows to a
// receiver and the receiver's rows from that sender are the same sequence.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_PLACEMENT_H
#define MOE_RT_KERNELS_PLACEMENT_H

#include "VarRouting.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe_rt::kernels {

/// The group's routing as every rank sees it.
struct PlacedGroup {
  int64_t G = 0, rank = 0, E = 0, El = 0, T = 0, k = 0, B = 0, R = 0;
  const int64_t *allIndices = nullptr; ///< G x T x k
  const int64_t *place = nullptr;      ///< G·B new ranks
};

/// This rank's part of a placing combine, both ways.
struct PlacedRoutes {
  /// Expert side, in send order (by destination rank, then (g, t, j)): the
  /// row l·R + p it sends, the choice's global index (g·T + t)·k + j, and j.
  std::vector<int64_t> sendRow, sendChoice, sendSlot;
  std::vector<int64_t> sendCount; ///< rows to each rank
  /// Token side, in receive order (by sending rank, then (g, t, j)): the
  /// local token t' and choice j each received row belongs to.
  std::vector<int64_t> recvToken, recvSlot;
  std::vector<int64_t> recvCount; ///< rows from each rank
};

/// "" when every rank receives exactly B samples and every rank is in the
/// group, else what is wrong (the same on every rank).
inline std::string checkPlacement(const PlacedGroup &p) {
  std::vector<int64_t> perRank(p.G, 0);
  for (int64_t s = 0; s < p.G * p.B; ++s) {
    if (p.place[s] < 0 || p.place[s] >= p.G)
      return "sample " + std::to_string(s) + " is placed on rank " +
             std::to_string(p.place[s]) + ", the group has " +
             std::to_string(p.G) + " ranks";
    ++perRank[p.place[s]];
  }
  for (int64_t r = 0; r < p.G; ++r)
    if (perRank[r] != p.B)
      return "rank " + std::to_string(r) + " would receive " +
             std::to_string(perRank[r]) + " samples, not " +
             std::to_string(p.B) + " (a placement keeps B per rank)";
  return "";
}

/// moe_rt_move_samples' pick: the samples (of the group's G B, in sample
/// order) placed on `rank`; "" or why they are not B of them.
inline std::string samplePicks(int64_t G, int64_t B, int64_t rank,
                               const int64_t *place,
                               std::vector<int64_t> &picks) {
  picks.clear();
  for (int64_t i = 0; i < G * B; ++i)
    if (place[i] == rank)
      picks.push_back(i);
  if (int64_t(picks.size()) == B)
    return "";
  return "the placement gives rank " + std::to_string(rank) + " " +
         std::to_string(picks.size()) + " samples, not its " +
         std::to_string(B);
}

/// Builds this rank's routes; "" or what is wrong (an index out of range,
/// a row over the bound R).
inline std::string placedRoutes(const PlacedGroup &p, PlacedRoutes &out) {
  int64_t N = p.T / p.B;
  // Row p of every choice, from each source's packed layout.
  std::vector<int64_t> row(p.G * p.T * p.k), before(p.E, 0);
  std::vector<int64_t> counts(p.E), pos(p.T * p.k), offset(p.E);
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t *idx = p.allIndices + g * p.T * p.k;
    for (int64_t i = 0; i < p.T * p.k; ++i)
      if (idx[i] < 0 || idx[i] >= p.E)
        return "rank " + std::to_string(g) + " routes to expert " +
               std::to_string(idx[i]) + " of " + std::to_string(p.E);
    packedRows(p.T, p.E, p.k, idx, counts.data(), pos.data());
    for (int64_t e = 0, at = 0; e < p.E; at += counts[e++])
      offset[e] = at;
    for (int64_t i = 0; i < p.T * p.k; ++i) {
      int64_t e = idx[i];
      row[g * p.T * p.k + i] = before[e] + pos[i] - offset[e];
      if (row[g * p.T * p.k + i] >= p.R)
        return "expert " + std::to_string(e) + " receives more than its " +
               std::to_string(p.R) + " rows";
    }
    for (int64_t e = 0; e < p.E; ++e)
      before[e] += counts[e];
  }
  // New local index of every sample placed on this rank.
  std::vector<int64_t> local(p.G * p.B, -1);
  for (int64_t s = 0, n = 0; s < p.G * p.B; ++s)
    if (p.place[s] == p.rank)
      local[s] = n++;
  out = PlacedRoutes();
  out.sendCount.assign(p.G, 0);
  out.recvCount.assign(p.G, 0);
  std::vector<std::vector<int64_t>> byDest(p.G), bySource(p.G);
  for (int64_t c = 0; c < p.G * p.T * p.k; ++c) {
    int64_t g = c / (p.T * p.k), t = (c / p.k) % p.T;
    int64_t owner = p.allIndices[c] / p.El, dest = p.place[g * p.B + t / N];
    if (owner == p.rank)
      byDest[dest].push_back(c);
    if (dest == p.rank)
      bySource[owner].push_back(c);
  }
  for (int64_t d = 0; d < p.G; ++d) {
    out.sendCount[d] = int64_t(byDest[d].size());
    for (int64_t c : byDest[d]) {
      out.sendRow.push_back((p.allIndices[c] % p.El) * p.R + row[c]);
      out.sendChoice.push_back(c);
      out.sendSlot.push_back(c % p.k);
    }
    out.recvCount[d] = int64_t(bySource[d].size());
    for (int64_t c : bySource[d]) {
      int64_t g = c / (p.T * p.k), t = (c / p.k) % p.T;
      out.recvToken.push_back(local[g * p.B + t / N] * N + t % N);
      out.recvSlot.push_back(c % p.k);
    }
  }
  return "";
}

/// Expert side, forward: send row i = w · y[row] (+ h[row] for a first
/// choice when a residual is inlined, NetMoE App. A).
template <typename T>
void placedSendRows(const PlacedRoutes &r, int64_t m, const T *allWeights,
                    const T *y, const T *residual, T *send) {
  for (size_t i = 0; i < r.sendRow.size(); ++i) {
    const T *src = y + r.sendRow[i] * m;
    T w = allWeights[r.sendChoice[i]];
    T *dst = send + int64_t(i) * m;
    for (int64_t a = 0; a < m; ++a)
      dst[a] = w * src[a];
    if (residual && r.sendSlot[i] == 0) {
      const T *h = residual + r.sendRow[i] * m;
      for (int64_t a = 0; a < m; ++a)
        dst[a] += h[a];
    }
  }
}

/// Token side, forward: out[t'] = sum over j, in j order, of the received
/// row of choice (t', j) — combineRows's order, so the identity placement
/// without a residual gives the plain combine bit for bit.
template <typename T>
void placedGather(const PlacedRoutes &r, int64_t tokens, int64_t k, int64_t m,
                  const T *recv, T *out) {
  std::vector<int64_t> at(tokens * k, -1);
  for (size_t i = 0; i < r.recvToken.size(); ++i)
    at[r.recvToken[i] * k + r.recvSlot[i]] = int64_t(i);
  std::fill(out, out + tokens * m, T(0));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j)
      if (at[t * k + j] >= 0) {
        const T *src = recv + at[t * k + j] * m;
        for (int64_t a = 0; a < m; ++a)
          out[t * m + a] += src[a];
      }
}

/// Token side, backward: the cotangent row of each received choice.
template <typename T>
void placedScatterCotangents(const PlacedRoutes &r, int64_t m, const T *dout,
                             T *send) {
  for (size_t i = 0; i < r.recvToken.size(); ++i)
    std::copy(dout + r.recvToken[i] * m, dout + (r.recvToken[i] + 1) * m,
              send + int64_t(i) * m);
}

/// Expert side, backward: dy[row] = w · d, dh[row] = d (first choices),
/// dweights of the choice = <d, y[row]> into the group-wide buffer
/// (combineRowsBackward's and combineWeightsBackward's arithmetic).
template <typename T>
void placedBackward(const PlacedRoutes &r, int64_t m, const T *allWeights,
                    const T *y, const T *recv, T *dy, T *dresidual,
                    T *allDweights) {
  for (size_t i = 0; i < r.sendRow.size(); ++i) {
    const T *d = recv + int64_t(i) * m, *src = y + r.sendRow[i] * m;
    T w = allWeights[r.sendChoice[i]];
    double dot = 0;
    for (int64_t a = 0; a < m; ++a) {
      dy[r.sendRow[i] * m + a] = w * d[a];
      dot += d[a] * src[a];
    }
    allDweights[r.sendChoice[i]] = T(dot);
    if (dresidual && r.sendSlot[i] == 0)
      std::copy(d, d + m, dresidual + r.sendRow[i] * m);
  }
}

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_PLACEMENT_H
