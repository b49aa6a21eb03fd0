//===- VarRouting.h - dropless (variable-count) routing layouts -*- C++ -*-===//
//
// The token and expert sides of dropless dispatch / combine when only the
// routed tokens travel (all-to-all-v), with no capacity slots:
//  - token side: rows packed expert-major, expert e's tokens from row
//    offset[e] = sum of counts[e' < e], in GShard order inside an expert
//    (routeTokens with no capacity), so that the rows for rank j (its E_l
//    experts) are one contiguous run;
//  - expert side: moe.dispatch's E_l x R x M result, local expert l's rows
//    packed from row 0, source ranks in order: rows[l][g] rows from rank
//    g; rows past the filled ones are zero. R is the buffer's bound.
// The received buffer of the all-to-all-v is source-rank-major: from rank
// g, its rows for local expert 0, then 1, ...
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_VARROUTING_H
#define MOE_RT_KERNELS_VARROUTING_H

#include "Routing.h"
#include "TokenChunks.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace moe_rt::kernels {

/// Tokens per expert (counts, E) and each (token, choice)'s packed row
/// (pos, T x k): offset of its expert + its GShard slot.
inline void packedRows(int64_t tokens, int64_t experts, int64_t k,
                       const int64_t *indices, int64_t *counts,
                       int64_t *pos) {
  routeTokens(tokens, experts, k, tokens * k + 1, indices, pos);
  std::fill(counts, counts + experts, 0);
  for (int64_t i = 0; i < tokens * k; ++i)
    ++counts[indices[i]];
  std::vector<int64_t> offset(experts, 0);
  for (int64_t e = 1; e < experts; ++e)
    offset[e] = offset[e - 1] + counts[e - 1];
  for (int64_t i = 0; i < tokens * k; ++i)
    pos[i] += offset[indices[i]];
}

/// Keeps token chunk `part` of `parts` of packedRows' result: of expert
/// e's counts[e] rows (GShard order), only partRange(counts[e]); the kept
/// rows are packed expert-major again (counts cut to the run) and every
/// other (token, choice) gets pos -1: it does not travel in this chunk.
/// The chunks of a partition together move every row exactly once. The
/// rule is TokenChunks.h's (the CUDA bodies apply it too).
inline void keepPart(int64_t pairs, int64_t experts, const int64_t *indices,
                     int64_t part, int64_t parts, int64_t *counts,
                     int64_t *pos) {
  std::vector<int64_t> offset(experts), first(experts), kept(experts);
  chunkCut(experts, part, parts, counts, offset.data(), first.data(),
           kept.data());
  for (int64_t i = 0; i < pairs; ++i)
    pos[i] = keptRow(pos[i], indices[i], counts, offset.data(), first.data(),
                     kept.data());
}

/// send[pos[t, j]] = x[t] (each routed row written once; pos -1: a row
/// of another token chunk, not sent).
template <typename T>
void gatherRows(int64_t tokens, int64_t k, int64_t m, const int64_t *pos,
                const T *x, T *send) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j)
      if (pos[t * k + j] >= 0)
        std::copy(x + t * m, x + (t + 1) * m, send + pos[t * k + j] * m);
}

/// Adjoint of gatherRows: dx[t] += sum over j of d[pos[t, j]].
template <typename T>
void scatterAddRows(int64_t tokens, int64_t k, int64_t m, const int64_t *pos,
                    const T *d, T *dx) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      if (pos[t * k + j] < 0)
        continue;
      const T *src = d + pos[t * k + j] * m;
      for (int64_t i = 0; i < m; ++i)
        dx[t * m + i] += src[i];
    }
}

/// y[t] = sum over j of w[t, j] recv[pos[t, j]].
template <typename T>
void combineRows(int64_t tokens, int64_t k, int64_t m, const int64_t *pos,
                 const T *weights, const T *recv, T *y) {
  std::fill(y, y + tokens * m, T(0));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      if (pos[t * k + j] < 0)
        continue;
      const T *src = recv + pos[t * k + j] * m;
      T w = weights[t * k + j];
      for (int64_t i = 0; i < m; ++i)
        y[t * m + i] += w * src[i];
    }
}

/// Adjoint of combineRows for the expert rows: drecv[pos[t, j]] = w[t, j]
/// dy[t] (overwritten: every packed row is one choice).
template <typename T>
void combineRowsBackward(int64_t tokens, int64_t k, int64_t m,
                         const int64_t *pos, const T *weights, const T *dy,
                         T *drecv) {
  for (int64_t tj = 0; tj < tokens * k; ++tj)
    for (int64_t i = 0; pos[tj] >= 0 && i < m; ++i)
      drecv[pos[tj] * m + i] = weights[tj] * dy[tj / k * m + i];
}

/// Adjoint of combineRows for the weights: dweights[t, j] = <dy[t],
/// recv[pos[t, j]]>, float products summed in double (0 for a choice of
/// another token chunk: its row is not here).
template <typename T>
void combineWeightsBackward(int64_t tokens, int64_t k, int64_t m,
                            const int64_t *pos, const T *recv, const T *dy,
                            T *dweights) {
  for (int64_t tj = 0; tj < tokens * k; ++tj) {
    if (pos[tj] < 0) {
      dweights[tj] = T(0);
      continue;
    }
    const T *row = recv + pos[tj] * m, *d = dy + tj / k * m;
    double sum = 0;
    for (int64_t i = 0; i < m; ++i)
      sum += d[i] * row[i];
    dweights[tj] = T(sum);
  }
}

/// out[i] = pos[i] + shift[g], g the rank holding the expert of pair i
/// (E_l = `local` experts per rank): a packed row's place in a two-way
/// exchange's buffer (varplan::TwoWayRows); -1 stays -1 (not moved).
inline void shiftRows(int64_t pairs, int64_t local, const int64_t *indices,
                      const int64_t *pos, const int64_t *shift, int64_t *out) {
  for (int64_t i = 0; i < pairs; ++i)
    out[i] = pos[i] < 0 ? -1 : pos[i] + shift[indices[i] / local];
}

/// The received (source-rank-major) buffer -> E_l x bound x m, tail rows
/// zero; `toRecv` runs it backwards (expert side -> send buffer). With
/// `rankShift`, rank g's rows sit rankShift[g] rows further into recv (a
/// two-way exchange's buffer, varplan::TwoWayRows).
template <typename T>
void recvToExpertMajor(int64_t ranks, int64_t local, int64_t bound, int64_t m,
                       const int64_t *rows, T *recv, T *out, bool toRecv,
                       const int64_t *rankShift = nullptr) {
  int64_t at = 0; // rows into recv, before the shift
  std::vector<int64_t> filled(local, 0);
  for (int64_t g = 0; g < ranks; ++g)
    for (int64_t l = 0; l < local; ++l) {
      int64_t n = rows[l * ranks + g];
      T *e = out + (l * bound + filled[l]) * m;
      T *r = recv + (at + (rankShift ? rankShift[g] : 0)) * m;
      if (toRecv)
        std::copy(e, e + n * m, r);
      else
        std::copy(r, r + n * m, e);
      filled[l] += n;
      at += n;
    }
  if (!toRecv)
    for (int64_t l = 0; l < local; ++l)
      std::fill(out + (l * bound + filled[l]) * m, out + (l + 1) * bound * m,
                T(0));
}

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_VARROUTING_H
