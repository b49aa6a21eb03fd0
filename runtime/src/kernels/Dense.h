//===- Dense.h - linear, norms, embedding, loss, with vjps ------*- C++ -*-===//
//
// The CPU kernels of the dense ops (moe.linear, moe.norm, moe.embedding,
// moe.cross_entropy) and their vjps, on row-major buffers: T rows (tokens)
// of a last dimension. Templated on the element type so the tests can check
// gradients in double precision against finite differences; the runtime
// instantiates float. Backward kernels accumulate (+=) into gradients, the
// way moe-build-train-step sums a weight's contributions.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_DENSE_H
#define MOE_RT_KERNELS_DENSE_H

#include "Gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace moe_rt::kernels {

//===--- linear: y = x W (+ b), W: K x N --------------------------------===//

template <typename T>
void linearForward(int64_t rows, int64_t k, int64_t n, const T *x, const T *w,
                   const T *bias, T *y) {
  gemm(false, false, rows, n, k, T(1), x, w, T(0), y);
  if (bias)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j)
        y[r * n + j] += bias[j];
}

template <typename T>
void linearBackward(int64_t rows, int64_t k, int64_t n, const T *x, const T *w,
                    const T *dy, T *dx, T *dw, T *dbias) {
  if (dx)
    gemm(false, true, rows, k, n, T(1), dy, w, T(1), dx); // dx += dy W^T
  if (dw)
    gemm(true, false, k, n, rows, T(1), x, dy, T(1), dw); // dW += x^T dy
  if (dbias)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j)
        dbias[j] += dy[r * n + j];
}

//===--- sigmoid gate: out[t] = sigmoid(x[t] . w) y[t] -------------------===//

template <typename T> double sigmoidGateScale(int64_t m, const T *x, const T *w) {
  double z = 0;
  for (int64_t j = 0; j < m; ++j)
    z += double(x[j]) * w[j];
  return 1.0 / (1.0 + std::exp(-z));
}

template <typename T>
void sigmoidGateForward(int64_t rows, int64_t m, const T *x, const T *w,
                        const T *y, T *out) {
  for (int64_t r = 0; r < rows; ++r) {
    double s = sigmoidGateScale(m, x + r * m, w);
    for (int64_t j = 0; j < m; ++j)
      out[r * m + j] = T(s * y[r * m + j]);
  }
}

/// dy = s dout; with g = (dout . y) s (1 - s): dx += g w, dw += g x.
/// Accumulates (dx, dw, dy may be null).
template <typename T>
void sigmoidGateBackward(int64_t rows, int64_t m, const T *x, const T *w,
                         const T *y, const T *dout, T *dx, T *dw, T *dy) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * m, *yr = y + r * m, *dr = dout + r * m;
    double s = sigmoidGateScale(m, xr, w), dot = 0;
    for (int64_t j = 0; j < m; ++j)
      dot += double(dr[j]) * yr[j];
    double g = dot * s * (1.0 - s);
    for (int64_t j = 0; j < m; ++j) {
      if (dy)
        dy[r * m + j] += T(s * dr[j]);
      if (dx)
        dx[r * m + j] += T(g * w[j]);
      if (dw)
        dw[j] += T(g * xr[j]);
    }
  }
}

//===--- norms over the last dimension ---------------------------------===//

/// Mean (0 for RMSNorm) and 1 / sqrt(variance + eps) of one row, the
/// variance taken around that mean.
template <typename T>
std::pair<double, double> normStats(bool rms, int64_t m, const T *row,
                                    double eps) {
  double mean = 0, var = 0;
  if (!rms)
    for (int64_t j = 0; j < m; ++j)
      mean += row[j];
  mean /= m;
  for (int64_t j = 0; j < m; ++j)
    var += (row[j] - mean) * (row[j] - mean);
  return {mean, 1.0 / std::sqrt(var / m + eps)};
}

/// LayerNorm (bias may be null) when `rms` is false, RMSNorm otherwise.
template <typename T>
void normForward(bool rms, int64_t rows, int64_t m, const T *x, const T *scale,
                 const T *bias, double eps, T *y) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * m;
    auto [mean, inv] = normStats(rms, m, xr, eps);
    for (int64_t j = 0; j < m; ++j)
      y[r * m + j] =
          T((xr[j] - mean) * inv * scale[j] + (bias ? bias[j] : T(0)));
  }
}

template <typename T>
void normBackward(bool rms, int64_t rows, int64_t m, const T *x, const T *scale,
                  double eps, const T *dy, T *dx, T *dscale, T *dbias) {
  std::vector<double> xhat(m), g(m);
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * m;
    const T *dyr = dy + r * m;
    auto [mean, inv] = normStats(rms, m, xr, eps);
    double sumG = 0, sumGx = 0;
    for (int64_t j = 0; j < m; ++j) {
      xhat[j] = (xr[j] - mean) * inv;
      g[j] = dyr[j] * scale[j];
      sumG += g[j];
      sumGx += g[j] * xhat[j];
      if (dscale)
        dscale[j] += T(dyr[j] * xhat[j]);
      if (dbias)
        dbias[j] += dyr[j];
    }
    if (!dx)
      continue;
    for (int64_t j = 0; j < m; ++j) {
      // LayerNorm: inv (g - mean(g) - xhat mean(g xhat));
      // RMSNorm:   inv (g - xhat mean(g xhat)).
      double d = g[j] - xhat[j] * sumGx / m - (rms ? 0.0 : sumG / m);
      dx[r * m + j] += T(inv * d);
    }
  }
}

//===--- embedding ------------------------------------------------------===//

/// Returns false if an id is outside [0, vocab).
template <typename T, typename Id>
bool embeddingForward(int64_t tokens, int64_t vocab, int64_t m, const Id *ids,
                      const T *table, T *y) {
  for (int64_t t = 0; t < tokens; ++t) {
    if (ids[t] < 0 || ids[t] >= vocab)
      return false;
    std::copy(table + ids[t] * m, table + (ids[t] + 1) * m, y + t * m);
  }
  return true;
}

template <typename T, typename Id>
bool embeddingBackward(int64_t tokens, int64_t vocab, int64_t m, const Id *ids,
                       const T *dy, T *dtable) {
  for (int64_t t = 0; t < tokens; ++t) {
    if (ids[t] < 0 || ids[t] >= vocab)
      return false;
    for (int64_t j = 0; j < m; ++j)
      dtable[ids[t] * m + j] += dy[t * m + j];
  }
  return true;
}

//===--- learned absolute positions -------------------------------------===//
//
// GPT-2's wpe: y[b, n, :] = x[b, n, :] + table[n, :] for x batch x seq x m
// and a table of at least seq rows (rows past seq are not read).

template <typename T>
void positionEmbeddingForward(int64_t batch, int64_t seq, int64_t m,
                              const T *x, const T *table, T *y) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < seq * m; ++i)
      y[b * seq * m + i] = x[b * seq * m + i] + table[i];
}

/// dx += dy; dtable[n] += sum_b dy[b, n] (either may be null).
template <typename T>
void positionEmbeddingBackward(int64_t batch, int64_t seq, int64_t m,
                               const T *dy, T *dx, T *dtable) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < seq * m; ++i) {
      if (dx)
        dx[b * seq * m + i] += dy[b * seq * m + i];
      if (dtable)
        dtable[i] += dy[b * seq * m + i];
    }
}

//===--- mean token cross-entropy ---------------------------------------===//

/// log(sum_v exp(row[v])), computed stably.
template <typename T> double logSumExp(int64_t n, const T *row) {
  double mx = *std::max_element(row, row + n), sum = 0;
  for (int64_t v = 0; v < n; ++v)
    sum += std::exp(row[v] - mx);
  return std::log(sum) + mx;
}

/// loss = mean_t (logsumexp(logits_t) - logits_t[label_t]); false on a
/// label outside [0, vocab).
template <typename T, typename Id>
bool crossEntropyForward(int64_t tokens, int64_t vocab, const T *logits,
                         const Id *labels, T *loss) {
  double total = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const T *row = logits + t * vocab;
    if (labels[t] < 0 || labels[t] >= vocab)
      return false;
    total += logSumExp(vocab, row) - row[labels[t]];
  }
  *loss = T(total / tokens);
  return true;
}

template <typename T, typename Id>
bool crossEntropyBackward(int64_t tokens, int64_t vocab, const T *logits,
                          const Id *labels, T dloss, T *dlogits) {
  for (int64_t t = 0; t < tokens; ++t) {
    const T *row = logits + t * vocab;
    if (labels[t] < 0 || labels[t] >= vocab)
      return false;
    double lse = logSumExp(vocab, row);
    for (int64_t v = 0; v < vocab; ++v) {
      double p = std::exp(row[v] - lse);
      dlogits[t * vocab + v] +=
          T(dloss * (p - (v == labels[t] ? 1.0 : 0.0)) / tokens);
    }
  }
  return true;
}

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_DENSE_H
