//===- Routing.h - gate, dispatch and combine, with vjps --------*- C++ -*-===//
//
// The token side of MoE routing on the CPU (the all-to-all between is the
// collectives' job):
//  - softmaxTopK: the softmax_topk gate. Probabilities are a softmax over all
//    E experts; each token keeps its k most probable (ties: lower index);
//    with `normalize` the k weights are renormalised to sum to 1, which is
//    Mixtral's softmax over the selected logits.
//  - routeTokens: capacity slots. GShard order: every token's first choice is
//    placed before any second choice, tokens in order, so which tokens are
//    dropped when an expert overflows follows GShard/Switch; C = 0 means
//    dropless (slot counts are data-dependent). windowSlots keeps one
//    window of the slots (a token chunk).
//  - dispatchLayout / combineGather: tokens into the E x C x M send buffer
//    (expert-major, so the block for rank j is contiguous) and back, weighted.
//  - toExpertMajor / toRankMajor: the local transposes between the received
//    G x E_l x C x M buffer and moe.dispatch's E_l x (G C) x M result.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_ROUTING_H
#define MOE_RT_KERNELS_ROUTING_H

#include "Dense.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace moe_rt::kernels {

/// p = softmax(row), computed stably.
template <typename T>
void softmaxRow(int64_t n, const T *row, std::vector<double> &p) {
  double mx = *std::max_element(row, row + n), sum = 0;
  for (int64_t e = 0; e < n; ++e)
    sum += p[e] = std::exp(row[e] - mx);
  for (double &v : p)
    v /= sum;
}

/// logits: tokens x experts. Writes indices and weights (tokens x k) and
/// per-expert counts (before capacity).
template <typename T>
void softmaxTopK(int64_t tokens, int64_t experts, int64_t k, bool normalize,
                 const T *logits, int64_t *indices, T *weights,
                 int64_t *counts) {
  std::fill(counts, counts + experts, 0);
  std::vector<double> p(experts);
  std::vector<int64_t> order(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    softmaxRow(experts, logits + t * experts, p);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    double kept = 0;
    for (int64_t j = 0; j < k; ++j)
      kept += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      indices[t * k + j] = order[j];
      weights[t * k + j] = T(normalize ? p[order[j]] / kept : p[order[j]]);
      ++counts[order[j]];
    }
  }
}

/// d(weights) -> d(logits), accumulated.
template <typename T>
void softmaxTopKBackward(int64_t tokens, int64_t experts, int64_t k,
                         bool normalize, const T *logits,
                         const int64_t *indices, const T *dweights,
                         T *dlogits) {
  std::vector<double> p(experts), dp(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    softmaxRow(experts, logits + t * experts, p);
    std::fill(dp.begin(), dp.end(), 0.0);
    double kept = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j)
      kept += p[indices[t * k + j]];
    if (normalize) {
      // w_j = p_j / S, S = sum_kept p: dp_j = (dw_j - sum_i dw_i w_i) / S.
      for (int64_t j = 0; j < k; ++j)
        dot += dweights[t * k + j] * p[indices[t * k + j]] / kept;
      for (int64_t j = 0; j < k; ++j)
        dp[indices[t * k + j]] = (dweights[t * k + j] - dot) / kept;
    } else {
      for (int64_t j = 0; j < k; ++j)
        dp[indices[t * k + j]] = dweights[t * k + j];
    }
    // Softmax Jacobian: dl_e = p_e (dp_e - sum_i p_i dp_i).
    double s = 0;
    for (int64_t e = 0; e < experts; ++e)
      s += p[e] * dp[e];
    for (int64_t e = 0; e < experts; ++e)
      dlogits[t * experts + e] += T(p[e] * (dp[e] - s));
  }
}

/// Capacity slot of each (token, choice): slot[t * k + j] in [0, C) or -1
/// when dropped. GShard order (all first choices, then all second, ...).
inline void routeTokens(int64_t tokens, int64_t experts, int64_t k,
                        int64_t capacity, const int64_t *indices,
                        int64_t *slots) {
  std::vector<int64_t> used(experts, 0);
  for (int64_t j = 0; j < k; ++j)
    for (int64_t t = 0; t < tokens; ++t) {
      int64_t e = indices[t * k + j];
      int64_t s = used[e]++;
      slots[t * k + j] = s < capacity ? s : -1;
    }
}

/// A window of the capacity slots, [first, first + count): slots already
/// routed with capacity first + count become slot - first, the ones before
/// the window -1 (token-level pipelining moves one window per chunk).
inline void windowSlots(int64_t n, int64_t first, int64_t *slots) {
  for (int64_t i = 0; i < n; ++i)
    slots[i] = slots[i] >= first ? slots[i] - first : -1;
}

/// x: tokens x m -> send: experts x capacity x m (zeros in empty slots).
template <typename T>
void dispatchLayout(int64_t tokens, int64_t k, int64_t experts,
                    int64_t capacity, int64_t m, const int64_t *indices,
                    const int64_t *slots, const T *x, T *send) {
  std::fill(send, send + experts * capacity * m, T(0));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j)
      if (int64_t s = slots[t * k + j]; s >= 0)
        std::copy(x + t * m, x + (t + 1) * m,
                  send + (indices[t * k + j] * capacity + s) * m);
}

/// Adjoint of dispatchLayout: dx[t] += sum over kept choices of dsend[slot].
template <typename T>
void dispatchLayoutBackward(int64_t tokens, int64_t k, int64_t capacity,
                            int64_t m, const int64_t *indices,
                            const int64_t *slots, const T *dsend, T *dx) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j)
      if (int64_t s = slots[t * k + j]; s >= 0) {
        const T *src = dsend + (indices[t * k + j] * capacity + s) * m;
        for (int64_t i = 0; i < m; ++i)
          dx[t * m + i] += src[i];
      }
}

/// y[t] = sum over kept choices of w[t, j] * recv[slot] (dropped: 0).
template <typename T>
void combineGather(int64_t tokens, int64_t k, int64_t capacity, int64_t m,
                   const int64_t *indices, const int64_t *slots,
                   const T *weights, const T *recv, T *y) {
  std::fill(y, y + tokens * m, T(0));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j)
      if (int64_t s = slots[t * k + j]; s >= 0) {
        const T *src = recv + (indices[t * k + j] * capacity + s) * m;
        T w = weights[t * k + j];
        for (int64_t i = 0; i < m; ++i)
          y[t * m + i] += w * src[i];
      }
}

/// Adjoint: drecv[slot] += w dy[t]; dweights[t, j] += <dy[t], recv[slot]>.
template <typename T>
void combineGatherBackward(int64_t tokens, int64_t k, int64_t capacity,
                           int64_t m, const int64_t *indices,
                           const int64_t *slots, const T *weights,
                           const T *recv, const T *dy, T *drecv, T *dweights) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j)
      if (int64_t s = slots[t * k + j]; s >= 0) {
        int64_t base = (indices[t * k + j] * capacity + s) * m;
        double d = 0;
        for (int64_t i = 0; i < m; ++i) {
          drecv[base + i] += weights[t * k + j] * dy[t * m + i];
          d += dy[t * m + i] * recv[base + i];
        }
        dweights[t * k + j] += T(d);
      }
}

/// in: ranks x local x capacity x m -> out: local x ranks x capacity x m.
template <typename T>
void toExpertMajor(int64_t ranks, int64_t local, int64_t capacity, int64_t m,
                   const T *in, T *out) {
  int64_t block = capacity * m;
  for (int64_t g = 0; g < ranks; ++g)
    for (int64_t l = 0; l < local; ++l)
      std::copy(in + (g * local + l) * block, in + (g * local + l + 1) * block,
                out + (l * ranks + g) * block);
}

/// The inverse transpose.
template <typename T>
void toRankMajor(int64_t ranks, int64_t local, int64_t capacity, int64_t m,
                 const T *in, T *out) {
  int64_t block = capacity * m;
  for (int64_t g = 0; g < ranks; ++g)
    for (int64_t l = 0; l < local; ++l)
      std::copy(in + (l * ranks + g) * block, in + (l * ranks + g + 1) * block,
                out + (g * local + l) * block);
}

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_ROUTING_H
