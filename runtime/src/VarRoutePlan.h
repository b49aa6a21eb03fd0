//===- VarRoutePlan.h - dropless routing's counts and offsets ---*- C++ -*-===//
//
// The host-side bookkeeping of variable-count (dropless) dispatch / combine
// that the CPU backend (src/cpu/CpuVarRoutingOps.cpp) and the CUDA backend
// (src/device/VarRoutingOps.h) share, so that both move the same rows and
// fail with the same words:
//  - `all` is every rank's per-expert counts, G x E (rank g's row: how many
//    of its (token, choice) pairs pick each expert), all-gathered;
//  - `rows` is the expert side's E_l x G table: rows[l][g] rows of local
//    expert l come from rank g (moe.dispatch's second result);
//  - the exchanges move rows per rank: to rank j, this rank's rows for j's
//    E_l experts (one contiguous run, kernels/VarRouting.h); from rank g,
//    sum over l of rows[l][g].
// Plain C++ (no MPI, no CUDA): tests/VarRoutePlanTest.cpp checks it on
// cases with known answers. Functions return "" or the reason; callers
// prefix the public call's name.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_VARROUTEPLAN_H
#define MOE_RT_SRC_VARROUTEPLAN_H

#include "CollectivePlan.h"
#include "OpShapes.h"
#include "kernels/VarRouting.h"
#include "kernels/TokenChunks.h"

#include "moe_rt/expert_placement.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe_rt::varplan {

/// Filled rows of local expert l: the sum over g of rows[l][g].
inline int64_t filledRows(int64_t ranks, int64_t l, const int64_t *rows) {
  int64_t n = 0;
  for (int64_t g = 0; g < ranks; ++g)
    n += rows[l * ranks + g];
  return n;
}

/// The first local expert whose rows exceed `bound` (or are negative), or
/// -1: what a `rows` tensor must satisfy before any layout reads it.
inline int64_t firstOverBound(int64_t ranks, int64_t local, int64_t bound,
                              const int64_t *rows) {
  for (int64_t l = 0; l < local; ++l) {
    int64_t n = 0;
    for (int64_t g = 0; g < ranks; ++g) {
      if (rows[l * ranks + g] < 0)
        return l;
      n += rows[l * ranks + g];
    }
    if (n > bound)
      return l;
  }
  return -1;
}

/// The rows this rank's local experts receive from each rank (E_l x G),
/// from every rank's counts.
inline void rowsFromCounts(const VarRouteShape &r, const int64_t *all,
                           int64_t *rows) {
  for (int64_t l = 0; l < r.El; ++l)
    for (int64_t g = 0; g < r.G; ++g)
      rows[l * r.G + g] = all[g * r.E + r.rank * r.El + l];
}

/// "" when every local expert of every rank receives at most R rows, else
/// the message naming the block, the first such expert and its load. Every
/// rank computes it from the same `all`, so all of them fail together,
/// with the same words, and none is left waiting in an exchange.
inline std::string overBound(const VarRouteShape &r, const int64_t *all) {
  for (int64_t j = 0; j < r.G; ++j)
    for (int64_t l = 0; l < r.El; ++l) {
      int64_t e = j * r.El + l, load = 0;
      for (int64_t g = 0; g < r.G; ++g)
        load += all[g * r.E + e];
      if (load > r.R)
        return "block " + std::to_string(r.block) +
               ": routing load over the dispatch bound: expert " +
               std::to_string(e) + " (local expert " + std::to_string(l) +
               " of rank " + std::to_string(j) + ") receives " +
               std::to_string(load) + " rows, bound " + std::to_string(r.R) +
               " (raise it: moe-flowmoe-pipeline's dropless-bound=N or "
               "--moe-variable-dropless=bound=N; or give the gate a "
               "capacity)";
    }
  return "";
}

/// "block B: " when the op knows its block, else "".
inline std::string blockPrefix(const VarRouteShape &r) {
  return r.block >= 0 ? "block " + std::to_string(r.block) + ": " : "";
}

/// The expert placement as physical ids: `phys[e]` = g E_l + s for the
/// slot (g, s) of r.slots that holds logical expert e; "" or the entry at
/// fault (moe_rt/expert_placement.h), after the block.
inline std::string physicalExperts(const VarRouteShape &r,
                                   std::vector<int64_t> &phys) {
  std::string why = expert_placement::checkSlots(r.slots, r.G, r.El, &phys);
  return why.empty() ? "" : blockPrefix(r) + why;
}

/// `n` routing choices `idx` as physical expert ids (entries outside
/// [0, E) are kept: the layouts refuse them); "" or the table's fault.
inline std::string toPhysical(const VarRouteShape &r, const int64_t *idx,
                              int64_t n, std::vector<int64_t> &out) {
  std::vector<int64_t> phys;
  if (std::string why = physicalExperts(r, phys); !why.empty())
    return why;
  out.resize(n);
  for (int64_t i = 0; i < n; ++i)
    out[i] = kernels::physicalExpert(idx[i], r.E, phys.data());
  return "";
}

/// Rows each way of one dropless op: toRank[j] token-side rows this rank
/// sends to rank j's experts, fromRank[g] expert-side rows that came from
/// rank g (combine sends them back the other way).
struct RankRows {
  std::vector<int64_t> toRank, fromRank;
};

/// The rows per rank from this rank's counts (`mine`, E) and the expert
/// side's `rows` (E_l x G); refuses a `rows` table over the bound R.
inline std::string rowsPerRank(const VarRouteShape &r, const int64_t *mine,
                               const int64_t *rows, RankRows &out) {
  if (int64_t l = firstOverBound(r.G, r.El, r.R, rows); l >= 0)
    return "rows of local expert " + std::to_string(l) + " exceed the bound " +
           std::to_string(r.R);
  out.toRank.assign(r.G, 0);
  out.fromRank.assign(r.G, 0);
  for (int64_t j = 0; j < r.G; ++j)
    for (int64_t l = 0; l < r.El; ++l) {
      out.toRank[j] += mine[j * r.El + l];
      out.fromRank[j] += rows[l * r.G + j];
    }
  return "";
}

/// The all-to-all-v plans both ways (in floats, M per row) over the token
/// side's T k rows and the expert side's E_l R rows; "" or why the counts
/// do not fit (a `rows` tensor that does not match the routing).
inline std::string planExchanges(const VarRouteShape &r, const RankRows &n,
                                 coll::PeerPlan &toExperts,
                                 coll::PeerPlan &toTokens) {
  std::string why =
      coll::planAllToAllV(int(r.G), n.toRank.data(), n.fromRank.data(), r.M,
                          r.T * r.k, r.M, r.El * r.R, toExperts);
  if (why.empty())
    why = coll::planAllToAllV(int(r.G), n.fromRank.data(), n.toRank.data(), r.M,
                              r.El * r.R, r.M, r.T * r.k, toTokens);
  return why.empty()
             ? ""
             : "the routing counts do not match the rows tensor: " + why;
}

/// Combine's vjp moves rows both ways at once, in one all-to-all-v: the
/// token side's gradient rows (w dy) to the experts, n.toRank[p] to rank p,
/// and the expert side's output rows (for the gate weights' gradient) to
/// the tokens, n.fromRank[p] to rank p. The two are independent (neither
/// needs what the other brings), so one exchange carries both: per peer p
/// the send buffer holds the gradient rows for p's experts, then the
/// output rows for p's tokens; what comes from p, the gradient rows for
/// this rank's experts, then the output rows for its tokens. Each row
/// keeps its one-way packed index (kernels/VarRouting.h) plus a shift per
/// peer, so the layouts write and read the exchange's buffers in place.
struct TwoWayRows {
  /// Rows to and from each peer (equal: both parts each way).
  std::vector<int64_t> perPeer;
  /// Shifts by peer: the gradient rows sent (token side) and received
  /// (expert side), the output rows sent (expert side) and received
  /// (token side).
  std::vector<int64_t> gradSent, gradReceived, outputSent, outputReceived;
};

inline TwoWayRows twoWayRows(const RankRows &n) {
  TwoWayRows t;
  int64_t G = int64_t(n.toRank.size()), to = 0, from = 0;
  for (int64_t p = 0; p < G; ++p) {
    t.perPeer.push_back(n.toRank[p] + n.fromRank[p]);
    t.gradSent.push_back(from);
    t.gradReceived.push_back(to);
    to += n.toRank[p];
    from += n.fromRank[p];
    t.outputSent.push_back(to);
    t.outputReceived.push_back(from);
  }
  return t;
}

/// "" when every local expert's rows fit the expert buffer (`slots` rows
/// each, moe_rt_expert_v's x), else why not.
inline std::string expertRowsFit(int64_t ranks, int64_t experts, int64_t slots,
                                 const int64_t *rows) {
  int64_t l = firstOverBound(ranks, experts, slots, rows);
  if (l < 0)
    return "";
  return "rows of local expert " + std::to_string(l) + " do not fit its " +
         std::to_string(slots) + " rows";
}

/// One counts exchange per layer (moe.exchange_counts): every rank's
/// counts of token chunk r.part of r.parts by physical expert (`all`,
/// G x E, what the chunk's all-gather would have delivered), cut from the
/// layer's exchanged counts `exchanged` (G x E, logical experts, whole
/// rows). `mine` is this rank's whole counts by physical expert: its row
/// of `exchanged` must say the same, or the counts are another routing's
/// (another layer's) and would size the exchange wrong. "" or the fault.
inline std::string countsFromExchange(const VarRouteShape &r,
                                      const int64_t *exchanged,
                                      const int64_t *mine, int64_t *all) {
  std::vector<int64_t> phys(r.E);
  for (int64_t e = 0; e < r.E; ++e)
    phys[e] = e;
  if (r.slots)
    if (std::string why = physicalExperts(r, phys); !why.empty())
      return why;
  for (int64_t e = 0; e < r.E; ++e) {
    int64_t p = phys[e], said = exchanged[r.rank * r.E + e];
    if (said != mine[p])
      return blockPrefix(r) + "the exchanged counts (all_counts) say rank " +
             std::to_string(r.rank) + " sends expert " + std::to_string(e) +
             " " + std::to_string(said) + " rows, its routing sends " +
             std::to_string(mine[p]) +
             ": they were exchanged for other routing (another layer?)";
    for (int64_t g = 0; g < r.G; ++g) {
      kernels::PartRange run =
          kernels::partRange(exchanged[g * r.E + e], r.part, r.parts);
      all[g * r.E + p] = run.end - run.first;
    }
  }
  return "";
}

/// moe_rt_rows_window's blocks of local expert l (kernels/TokenChunks.h),
/// `total` and `chunkRows` its G entries: the first source rank at fault,
/// or -1.
inline int64_t windowBlocks(const RowsWindowShape &w, const int64_t *total,
                            const int64_t *chunkRows,
                            kernels::WindowBlock *blocks) {
  return kernels::windowBlocks(w.G, total, chunkRows, w.chunkRows, w.outRows,
                               w.fromPart, w.fromParts, w.part, w.parts,
                               blocks);
}

/// Why block (l, g) of windowBlocks is at fault (both backends' words).
inline std::string windowFault(const RowsWindowShape &w, int64_t l, int64_t g,
                               const int64_t *total, const int64_t *chunkRows) {
  return "rows[" + std::to_string(l) + "][" + std::to_string(g) +
         "] = " + std::to_string(chunkRows[g]) + " of forward chunk " +
         std::to_string(w.fromPart) + " is not that chunk of the total " +
         std::to_string(total[g]) + " (or does not fit its buffer)";
}

} // namespace moe_rt::varplan

#endif // MOE_RT_SRC_VARROUTEPLAN_H
