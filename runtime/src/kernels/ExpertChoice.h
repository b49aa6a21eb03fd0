//===- ExpertChoice.h - expert-choice gate and routing ----------*- C++ -*-===//
//
// Expert-choice routing (Zhou et al. 2022) on the CPU, over T tokens (the
// B x N tokens of one gate call, flattened), E experts and capacity C:
//  - expertChoiceTopC: S = softmax(logits) over the E experts of each
//    token; every expert e takes the C tokens with the largest S[:, e]
//    (ties: the lower token index). indices[e, c] is the token id,
//    weights[e, c] = S[indices[e, c], e], counts[e] = C. A token can be
//    picked by several experts or by none.
//  - expertChoiceBackward: d(weights) -> d(logits) through the softmax of
//    each token, over every (e, c) that picked it.
//  - ecDispatchLayout / ecCombineGather: the E x C x M send buffer is
//    slot (e, c) = x[indices[e, c]] — the same expert-major layout as token
//    choice's (Routing.h), so the all-to-all and the to-expert-major /
//    to-rank-major transposes are shared. Combine gives token t the sum of
//    weights[e, c] · y[e, c] over the slots holding t (0 when none does).
//  - and their adjoints.
// An index < 0 marks an empty slot (skipped everywhere); the ops refuse
// indices >= T before a kernel runs (ecFirstBadIndex).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_EXPERTCHOICE_H
#define MOE_RT_KERNELS_EXPERTCHOICE_H

#include "Routing.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace moe_rt::kernels {

/// logits: tokens x experts. Writes indices, weights (experts x capacity)
/// and counts (experts; = capacity). Needs 1 <= capacity <= tokens.
template <typename T>
void expertChoiceTopC(int64_t tokens, int64_t experts, int64_t capacity,
                      const T *logits, int64_t *indices, T *weights,
                      int64_t *counts) {
  std::vector<double> p(tokens * experts), row(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    softmaxRow(experts, logits + t * experts, row);
    std::copy(row.begin(), row.end(), p.begin() + t * experts);
  }
  std::vector<int64_t> order(tokens);
  for (int64_t e = 0; e < experts; ++e) {
    std::iota(order.begin(), order.end(), 0);
    // A strict total order (score, then token id), so partial_sort is as
    // deterministic as a stable sort.
    std::partial_sort(order.begin(), order.begin() + capacity, order.end(),
                      [&](int64_t a, int64_t b) {
                        double pa = p[a * experts + e], pb = p[b * experts + e];
                        return pa > pb || (pa == pb && a < b);
                      });
    for (int64_t c = 0; c < capacity; ++c) {
      indices[e * capacity + c] = order[c];
      weights[e * capacity + c] = T(p[order[c] * experts + e]);
    }
    counts[e] = capacity;
  }
}

/// d(weights) (experts x capacity) -> d(logits) (tokens x experts),
/// accumulated: dS[t, e] = sum of dweights[e, c] over the slots of e
/// holding t, then dl_t = S_t ⊙ (dS_t - <S_t, dS_t>).
template <typename T>
void expertChoiceBackward(int64_t tokens, int64_t experts, int64_t capacity,
                          const T *logits, const int64_t *indices,
                          const T *dweights, T *dlogits) {
  std::vector<double> dS(tokens * experts, 0.0), p(experts);
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t c = 0; c < capacity; ++c)
      if (int64_t t = indices[e * capacity + c]; t >= 0)
        dS[t * experts + e] += dweights[e * capacity + c];
  for (int64_t t = 0; t < tokens; ++t) {
    const double *d = dS.data() + t * experts;
    if (std::all_of(d, d + experts, [](double v) { return v == 0.0; }))
      continue; // picked by no expert: no gradient reaches its logits
    softmaxRow(experts, logits + t * experts, p);
    double s = 0;
    for (int64_t e = 0; e < experts; ++e)
      s += p[e] * d[e];
    for (int64_t e = 0; e < experts; ++e)
      dlogits[t * experts + e] += T(p[e] * (d[e] - s));
  }
}

/// The first of `slots` indices that is neither a token id in [0, tokens)
/// nor the empty mark -1, or -1 when all are valid.
inline int64_t ecFirstBadIndex(int64_t slots, const int64_t *indices,
                               int64_t tokens) {
  for (int64_t i = 0; i < slots; ++i)
    if (indices[i] < -1 || indices[i] >= tokens)
      return i;
  return -1;
}

/// x: tokens x m -> send: experts x capacity x m, slot (e, c) =
/// x[indices[e, c]] (zeros in empty slots).
template <typename T>
void ecDispatchLayout(int64_t experts, int64_t capacity, int64_t m,
                      const int64_t *indices, const T *x, T *send) {
  for (int64_t s = 0; s < experts * capacity; ++s) {
    int64_t t = indices[s];
    if (t >= 0)
      std::copy(x + t * m, x + (t + 1) * m, send + s * m);
    else
      std::fill(send + s * m, send + (s + 1) * m, T(0));
  }
}

/// Adjoint of ecDispatchLayout: dx[indices[e, c]] += dsend[e, c]
/// (accumulated).
template <typename T>
void ecDispatchLayoutBackward(int64_t experts, int64_t capacity, int64_t m,
                              const int64_t *indices, const T *dsend, T *dx) {
  for (int64_t s = 0; s < experts * capacity; ++s)
    if (int64_t t = indices[s]; t >= 0)
      for (int64_t i = 0; i < m; ++i)
        dx[t * m + i] += dsend[s * m + i];
}

/// y (tokens x m, overwritten): y[t] = sum over slots (e, c) holding t of
/// weights[e, c] · recv[e, c]; 0 for tokens no expert picked.
template <typename T>
void ecCombineGather(int64_t tokens, int64_t experts, int64_t capacity,
                     int64_t m, const int64_t *indices, const T *weights,
                     const T *recv, T *y) {
  std::fill(y, y + tokens * m, T(0));
  for (int64_t s = 0; s < experts * capacity; ++s)
    if (int64_t t = indices[s]; t >= 0) {
      T w = weights[s];
      for (int64_t i = 0; i < m; ++i)
        y[t * m + i] += w * recv[s * m + i];
    }
}

/// Adjoint (accumulated): drecv[e, c] += w[e, c] dy[t];
/// dweights[e, c] += <dy[t], recv[e, c]>, t = indices[e, c].
template <typename T>
void ecCombineGatherBackward(int64_t experts, int64_t capacity, int64_t m,
                             const int64_t *indices, const T *weights,
                             const T *recv, const T *dy, T *drecv,
                             T *dweights) {
  for (int64_t s = 0; s < experts * capacity; ++s)
    if (int64_t t = indices[s]; t >= 0) {
      double d = 0;
      for (int64_t i = 0; i < m; ++i) {
        drecv[s * m + i] += weights[s] * dy[t * m + i];
        d += double(dy[t * m + i]) * recv[s * m + i];
      }
      dweights[s] += T(d);
    }
}

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_EXPERTCHOICE_H
