//===- DenseOps.h - dense ops over an executor ------------------*- C++ -*-===//
//
// The CUDA backend's linear, norm, embedding, position embedding,
// cross-entropy, add, copy and sgd, written once over an executor X (see
// Device.h): CudaExecutor runs them on a GPU (src/cuda/CudaDenseOps.cu),
// HostExecutor on the host, where runtime/tests/DeviceDenseTest.cpp checks
// them against the CPU kernels of src/kernels/Dense.h.
//
// Semantics are the CPU ops' (src/cpu/CpuDenseOps.cpp), not the
// raw kernels': backward calls OVERWRITE their gradient outputs (the CPU op
// zeroes them before the accumulating kernel runs). Pointers are device
// pointers; shapes have been checked by the caller. A bad token id or label
// fails the executor's stream with the CPU op's message.
//
// Each phase is one forEach (one thread per row, element or column) or one
// X::gemm; reductions are per thread, in double as the CPU kernels do,
// without atomics except the embedding gradient's scatter-add.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_DEVICE_DENSEOPS_H
#define MOE_RT_SRC_DEVICE_DENSEOPS_H

#include "Device.h"

#include "../Error.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace moe_rt::device {

namespace dense {

/// C = op(A) op(B) (beta 0) or C += ... (beta 1); with k == 0 the product
/// is empty, and C is zeroed (beta 0) rather than left to the BLAS.
template <class X> moe_rt_status gemmInto(X &x, const GemmDesc &g) {
  if (g.k == 0) {
    if (g.beta != 0)
      return x.status();
    for (int64_t b = 0; b < g.batch; ++b)
      for (int64_t r = 0; r < g.m; ++r)
        if (moe_rt_status st =
                x.zero(g.c + b * g.strideC + r * g.ldc, sizeof(float) * g.n))
          return st;
    return x.status();
  }
  return x.gemm(g);
}


//===--- elementwise ----------------------------------------------------===//

struct AddBody {
  const float *a, *b;
  float *out;
  MOE_HD void operator()(int64_t i) const { out[i] = a[i] + b[i]; }
};

/// out = param - lr * grad, with lr rounded to float first (as the CPU op).
struct SgdBody {
  const float *param, *grad;
  float step;
  float *out;
  MOE_HD void operator()(int64_t i) const {
    out[i] = param[i] - step * grad[i];
  }
};

/// y[r, j] += bias[j] over rows x n.
struct AddBiasBody {
  float *y;
  const float *bias;
  int64_t n;
  MOE_HD void operator()(int64_t i) const { y[i] += bias[i % n]; }
};

/// out[j] = sum_r in[r, j] (a bias gradient), one thread per column.
struct ColumnSumBody {
  const float *in;
  int64_t rows, n;
  float *out;
  MOE_HD void operator()(int64_t j) const {
    double acc = 0;
    for (int64_t r = 0; r < rows; ++r)
      acc += in[r * n + j];
    out[j] = float(acc);
  }
};

//===--- sigmoid gate -----------------------------------------------------===//

/// s[r] = sigmoid(x[r] . w) and, with dout, g[r] = (dout[r] . y[r]) s (1 -
/// s); one thread per row (kernels::sigmoidGateForward / Backward).
struct SigmoidGateRowBody {
  const float *x, *w, *y, *dout;
  int64_t m;
  double *s, *g;
  MOE_HD void operator()(int64_t r) const {
    double z = 0, dot = 0;
    for (int64_t j = 0; j < m; ++j)
      z += double(x[r * m + j]) * w[j];
    double sr = 1.0 / (1.0 + ::exp(-z));
    s[r] = sr;
    if (!dout)
      return;
    for (int64_t j = 0; j < m; ++j)
      dot += double(dout[r * m + j]) * y[r * m + j];
    g[r] = dot * sr * (1.0 - sr);
  }
};

/// out[i] = scale[i / m] * in[i]: each row scaled by its own factor.
struct RowScaleBody {
  const double *scale;
  const float *in;
  int64_t m;
  float *out;
  MOE_HD void operator()(int64_t i) const {
    out[i] = float(scale[i / m] * in[i]);
  }
};

/// dx[r, j] = g[r] w[j].
struct OuterBody {
  const double *g;
  const float *w;
  int64_t m;
  float *dx;
  MOE_HD void operator()(int64_t i) const {
    dx[i] = float(g[i / m] * w[i % m]);
  }
};

/// dw[j] = sum_r g[r] x[r, j], one thread per column.
struct WeightedColumnSumBody {
  const double *g;
  const float *x;
  int64_t rows, m;
  float *dw;
  MOE_HD void operator()(int64_t j) const {
    double acc = 0;
    for (int64_t r = 0; r < rows; ++r)
      acc += g[r] * x[r * m + j];
    dw[j] = float(acc);
  }
};

//===--- norms ------------------------------------------------------------===//

/// Mean (0 for RMS) and 1 / sqrt(var + eps) of row r, as kernels::normStats.
MOE_HD inline void rowStats(bool rms, int64_t m, const float *row, double eps,
                            double &mean, double &inv) {
  mean = 0;
  if (!rms)
    for (int64_t j = 0; j < m; ++j)
      mean += row[j];
  mean /= m;
  double var = 0;
  for (int64_t j = 0; j < m; ++j)
    var += (row[j] - mean) * (row[j] - mean);
  inv = 1.0 / ::sqrt(var / m + eps);
}

/// stats[2r] = mean, stats[2r + 1] = inv of row r.
struct NormStatsBody {
  bool rms;
  int64_t m;
  const float *x;
  double eps;
  double *stats;
  MOE_HD void operator()(int64_t r) const {
    rowStats(rms, m, x + r * m, eps, stats[2 * r], stats[2 * r + 1]);
  }
};

struct NormApplyBody {
  int64_t m;
  const float *x, *scale, *bias;
  const double *stats;
  float *y;
  MOE_HD void operator()(int64_t i) const {
    int64_t r = i / m, j = i % m;
    double mean = stats[2 * r], inv = stats[2 * r + 1];
    y[i] = float((x[i] - mean) * inv * scale[j] + (bias ? bias[j] : 0.0f));
  }
};

/// Per row: mean, inv, mean(g) and mean(g xhat), g = dy * scale
/// (stats[4r .. 4r + 3]).
struct NormGradStatsBody {
  bool rms;
  int64_t m;
  const float *x, *scale, *dy;
  double eps;
  double *stats;
  MOE_HD void operator()(int64_t r) const {
    const float *xr = x + r * m, *dyr = dy + r * m;
    double mean, inv;
    rowStats(rms, m, xr, eps, mean, inv);
    double sumG = 0, sumGx = 0;
    for (int64_t j = 0; j < m; ++j) {
      double g = double(dyr[j]) * scale[j];
      sumG += g;
      sumGx += g * ((xr[j] - mean) * inv);
    }
    double *st = stats + 4 * r;
    st[0] = mean;
    st[1] = inv;
    st[2] = sumG / m;
    st[3] = sumGx / m;
  }
};

/// LayerNorm: dx = inv (g - mean(g) - xhat mean(g xhat)); RMSNorm drops
/// the mean(g) term.
struct NormGradDxBody {
  bool rms;
  int64_t m;
  const float *x, *scale, *dy;
  const double *stats;
  float *dx;
  MOE_HD void operator()(int64_t i) const {
    int64_t r = i / m, j = i % m;
    const double *st = stats + 4 * r;
    double xhat = (x[i] - st[0]) * st[1];
    double g = double(dy[i]) * scale[j];
    double d = g - xhat * st[3] - (rms ? 0.0 : st[2]);
    dx[i] = float(st[1] * d);
  }
};

/// dscale[j] = sum_r dy xhat, dbias[j] = sum_r dy (either may be null),
/// one thread per column.
struct NormGradColumnsBody {
  int64_t rows, m;
  const float *x, *dy;
  const double *stats; // 4 per row
  float *dscale, *dbias;
  MOE_HD void operator()(int64_t j) const {
    double ds = 0, db = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double *st = stats + 4 * r;
      double g = dy[r * m + j];
      ds += g * ((x[r * m + j] - st[0]) * st[1]);
      db += g;
    }
    if (dscale)
      dscale[j] = float(ds);
    if (dbias)
      dbias[j] = float(db);
  }
};

//===--- embedding --------------------------------------------------------===//

struct EmbeddingBody {
  int64_t vocab, m;
  const int64_t *ids;
  const float *table;
  float *y;
  int32_t *word;
  int32_t code;
  MOE_HD void operator()(int64_t i) const {
    int64_t id = ids[i / m];
    if (id < 0 || id >= vocab) {
      raiseError(word, code);
      return;
    }
    y[i] = table[id * m + i % m];
  }
};

/// dtable[id_t] += dy[t] (dtable zeroed first): a scatter-add, atomic on a
/// GPU because tokens may share an id.
struct EmbeddingGradBody {
  int64_t vocab, m;
  const int64_t *ids;
  const float *dy;
  float *dtable;
  int32_t *word;
  int32_t code;
  MOE_HD void operator()(int64_t i) const {
    int64_t id = ids[i / m];
    if (id < 0 || id >= vocab) {
      raiseError(word, code);
      return;
    }
    atomicAddF(dtable + id * m + i % m, dy[i]);
  }
};

//===--- learned absolute positions ---------------------------------------===//

/// y[b, n, :] = x[b, n, :] + table[n, :]; `plane` = seq * m.
struct PositionAddBody {
  int64_t plane;
  const float *x, *table;
  float *y;
  MOE_HD void operator()(int64_t i) const { y[i] = x[i] + table[i % plane]; }
};

/// dtable[i] = sum_b dy[b, i] for i < plane, 0 for the rows past seq; one
/// thread per table element, summed in float over b = 0.. as the CPU
/// kernel does (the same float result).
struct PositionGradBody {
  int64_t batch, plane;
  const float *dy;
  float *dtable;
  MOE_HD void operator()(int64_t i) const {
    if (i >= plane) {
      dtable[i] = 0.0f;
      return;
    }
    float acc = 0.0f;
    for (int64_t b = 0; b < batch; ++b)
      acc += dy[b * plane + i];
    dtable[i] = acc;
  }
};

//===--- cross-entropy ----------------------------------------------------===//

/// log(sum_v exp(row[v])) as kernels::logSumExp: max of the floats, then a
/// double sum.
MOE_HD inline double rowLogSumExp(int64_t n, const float *row) {
  float mx = row[0];
  for (int64_t v = 1; v < n; ++v)
    mx = row[v] > mx ? row[v] : mx;
  double sum = 0;
  for (int64_t v = 0; v < n; ++v)
    sum += ::exp(double(row[v]) - mx);
  return ::log(sum) + mx;
}

/// Per token: out[t] = logsumexp(row) (withLabel false) or
/// logsumexp(row) - row[label] (withLabel true); a label outside the
/// vocabulary raises the error.
struct TokenLseBody {
  int64_t vocab;
  const float *logits;
  const int64_t *labels;
  bool withLabel;
  double *out;
  int32_t *word;
  int32_t code;
  MOE_HD void operator()(int64_t t) const {
    int64_t label = labels[t];
    if (label < 0 || label >= vocab) {
      raiseError(word, code);
      return;
    }
    const float *row = logits + t * vocab;
    double lse = rowLogSumExp(vocab, row);
    out[t] = withLabel ? lse - row[label] : lse;
  }
};

/// loss = mean of the per-token terms; one thread (tokens are summed in
/// order, in double, as the CPU kernel does).
struct MeanBody {
  int64_t n;
  const double *terms;
  float *out;
  MOE_HD void operator()(int64_t) const {
    double total = 0;
    for (int64_t t = 0; t < n; ++t)
      total += terms[t];
    *out = float(total / n);
  }
};

/// dlogits = dloss (softmax - onehot(label)) / tokens.
struct CrossEntropyGradBody {
  int64_t tokens, vocab;
  const float *logits;
  const int64_t *labels;
  const double *lse;
  const float *dloss;
  float *dlogits;
  MOE_HD void operator()(int64_t i) const {
    int64_t t = i / vocab, v = i % vocab;
    int64_t label = labels[t];
    if (label < 0 || label >= vocab)
      return; // TokenLseBody raised the error
    double p = ::exp(logits[i] - lse[t]);
    dlogits[i] = float(dloss[0] * (p - (v == label ? 1.0 : 0.0)) / tokens);
  }
};

/// The error word and the code a body raises for `message`; nullptr when
/// the executor has already failed (its message stands) or the stream has
/// no error word (then a message is set): see noErrorWord.
template <class X>
int32_t *errorWordFor(X &x, const std::string &message, int32_t &code) {
  if (x.status())
    return nullptr;
  int32_t *word = x.errorWord();
  if (!word) {
    fail(MOE_RT_BACKEND_ERROR, "no device error word for: " + message);
    return nullptr;
  }
  code = x.errorCode(message.c_str());
  return word;
}

/// The status of an op that got no error word from errorWordFor.
template <class X> moe_rt_status noErrorWord(const X &x) {
  return x.status() ? x.status() : MOE_RT_BACKEND_ERROR;
}

} // namespace dense

//===--- ops --------------------------------------------------------------===//

/// out = a + b (moe_rt_add).
template <class X>
moe_rt_status add(X &x, int64_t n, const float *a, const float *b,
                  float *out) {
  return x.forEach(n, dense::AddBody{a, b, out});
}

/// out = param - float(lr) * grad (moe_rt_sgd).
template <class X>
moe_rt_status sgd(X &x, int64_t n, const float *param, const float *grad,
                  double lr, float *out) {
  return x.forEach(n, dense::SgdBody{param, grad, float(lr), out});
}

/// `count` elements of `elementSize` bytes from src + srcOffset to
/// dst + dstOffset (moe_rt_copy; offsets in elements).
template <class X>
moe_rt_status copyElements(X &x, const void *src, int64_t srcOffset,
                           void *dst, int64_t dstOffset, int64_t count,
                           size_t elementSize) {
  return x.copy(static_cast<char *>(dst) + dstOffset * elementSize,
                static_cast<const char *>(src) + srcOffset * elementSize,
                size_t(count) * elementSize);
}

/// y = x w (+ bias); x rows x k, w k x n (kernels::linearForward).
template <class X>
moe_rt_status linearForward(X &x, int64_t rows, int64_t k, int64_t n,
                            const float *in, const float *w, const float *bias,
                            float *y) {
  if (dense::gemmInto(x, gemmDesc(false, false, rows, n, k, 1, in, w, 0, y)))
    return x.status();
  if (bias)
    return x.forEach(rows * n, dense::AddBiasBody{y, bias, n});
  return x.status();
}

/// dx = dy w^T, dw = x^T dy, dbias = column sums of dy (each overwritten;
/// each may be null).
template <class X>
moe_rt_status linearBackward(X &x, int64_t rows, int64_t k, int64_t n,
                             const float *in, const float *w, const float *dy,
                             float *dx, float *dw, float *dbias) {
  using dense::gemmInto;
  if (dx && gemmInto(x, gemmDesc(false, true, rows, k, n, 1, dy, w, 0, dx)))
    return x.status();
  if (dw && gemmInto(x, gemmDesc(true, false, k, n, rows, 1, in, dy, 0, dw)))
    return x.status();
  if (dbias)
    return x.forEach(n, dense::ColumnSumBody{dy, rows, n, dbias});
  return x.status();
}

/// out = sigmoid(x w) y per row of rows x m (kernels::sigmoidGateForward).
template <class X>
moe_rt_status sigmoidGateForward(X &x, int64_t rows, int64_t m,
                                 const float *in, const float *w,
                                 const float *y, float *out) {
  double *s = scratchF64(x, rows);
  if (!s || x.forEach(rows, dense::SigmoidGateRowBody{in, w, y, nullptr, m, s,
                                                      nullptr}))
    return x.status();
  return x.forEach(rows * m, dense::RowScaleBody{s, y, m, out});
}

/// dy = s dout, dx = g w^T, dw = x^T g (each overwritten; each may be null).
template <class X>
moe_rt_status sigmoidGateBackward(X &x, int64_t rows, int64_t m,
                                  const float *in, const float *w,
                                  const float *y, const float *dout, float *dx,
                                  float *dw, float *dy) {
  double *s = scratchF64(x, 2 * rows);
  if (!s || x.forEach(rows, dense::SigmoidGateRowBody{in, w, y, dout, m, s,
                                                      s + rows}))
    return x.status();
  const double *g = s + rows;
  if ((dy && x.forEach(rows * m, dense::RowScaleBody{s, dout, m, dy})) ||
      (dx && x.forEach(rows * m, dense::OuterBody{g, w, m, dx})) ||
      (dw && x.forEach(m, dense::WeightedColumnSumBody{g, in, rows, m, dw})))
    return x.status();
  return x.status();
}

/// LayerNorm (rms false; bias may be null) or RMSNorm over the last
/// dimension m of rows x m (kernels::normForward).
template <class X>
moe_rt_status normForward(X &x, bool rms, int64_t rows, int64_t m,
                          const float *in, const float *scale,
                          const float *bias, double eps, float *y) {
  double *stats = scratchF64(x, 2 * rows);
  if (!stats)
    return x.status();
  if (x.forEach(rows, dense::NormStatsBody{rms, m, in, eps, stats}))
    return x.status();
  return x.forEach(rows * m,
                   dense::NormApplyBody{m, in, scale, bias, stats, y});
}

/// dx, dscale, dbias (overwritten; dscale/dbias may be null) of a norm
/// (kernels::normBackward).
template <class X>
moe_rt_status normBackward(X &x, bool rms, int64_t rows, int64_t m,
                           const float *in, const float *scale, double eps,
                           const float *dy, float *dx, float *dscale,
                           float *dbias) {
  double *stats = scratchF64(x, 4 * rows);
  if (!stats)
    return x.status();
  if (x.forEach(rows,
                dense::NormGradStatsBody{rms, m, in, scale, dy, eps, stats}))
    return x.status();
  if (dx && x.forEach(rows * m, dense::NormGradDxBody{rms, m, in, scale, dy,
                                                      stats, dx}))
    return x.status();
  if (dscale || dbias)
    return x.forEach(m, dense::NormGradColumnsBody{rows, m, in, dy, stats,
                                                   dscale, dbias});
  return x.status();
}

/// y[t] = table[ids[t]] (moe_rt_embedding); an id outside [0, vocab)
/// fails the stream.
template <class X>
moe_rt_status embeddingForward(X &x, int64_t tokens, int64_t vocab, int64_t m,
                               const int64_t *ids, const float *table,
                               float *y) {
  int32_t code = 0;
  int32_t *word = dense::errorWordFor(
      x,
      "moe_rt_embedding: a token id is outside [0, " + std::to_string(vocab) +
          ")",
      code);
  if (!word)
    return dense::noErrorWord(x);
  return x.forEach(tokens * m,
                   dense::EmbeddingBody{vocab, m, ids, table, y, word, code});
}

/// dtable = scatter-add of dy by id (overwritten; moe_rt_embedding_grad).
template <class X>
moe_rt_status embeddingBackward(X &x, int64_t tokens, int64_t vocab,
                                int64_t m, const int64_t *ids, const float *dy,
                                float *dtable) {
  int32_t code = 0;
  int32_t *word = dense::errorWordFor(
      x, "moe_rt_embedding_grad: a token id is outside the table", code);
  if (!word)
    return dense::noErrorWord(x);
  if (x.zero(dtable, sizeof(float) * size_t(vocab * m)))
    return x.status();
  return x.forEach(tokens * m, dense::EmbeddingGradBody{vocab, m, ids, dy,
                                                        dtable, word, code});
}

/// y = x + table[position] (moe_rt_position_embedding): x batch x seq x m,
/// table rows x m with rows >= seq.
template <class X>
moe_rt_status positionEmbeddingForward(X &x, int64_t batch, int64_t seq,
                                       int64_t m, const float *in,
                                       const float *table, float *y) {
  return x.forEach(batch * seq * m,
                   dense::PositionAddBody{seq * m, in, table, y});
}

/// dx = dy, dtable = sum over the batch of dy, rows past seq zero (each
/// overwritten; each may be null; moe_rt_position_embedding_grad).
template <class X>
moe_rt_status positionEmbeddingBackward(X &x, int64_t batch, int64_t seq,
                                        int64_t rows, int64_t m,
                                        const float *dy, float *dx,
                                        float *dtable) {
  if (dx && x.copy(dx, dy, sizeof(float) * size_t(batch * seq * m)))
    return x.status();
  if (dtable)
    return x.forEach(rows * m,
                     dense::PositionGradBody{batch, seq * m, dy, dtable});
  return x.status();
}

/// loss (0-d) = mean over tokens of logsumexp(logits_t) - logits_t[label_t]
/// (moe_rt_cross_entropy).
template <class X>
moe_rt_status crossEntropyForward(X &x, int64_t tokens, int64_t vocab,
                                  const float *logits, const int64_t *labels,
                                  float *loss) {
  int32_t code = 0;
  int32_t *word = dense::errorWordFor(
      x, "moe_rt_cross_entropy: a label is outside the vocabulary", code);
  if (!word)
    return dense::noErrorWord(x);
  double *terms = scratchF64(x, tokens);
  if (!terms)
    return x.status();
  if (x.forEach(tokens, dense::TokenLseBody{vocab, logits, labels, true, terms,
                                            word, code}))
    return x.status();
  return x.forEach(1, dense::MeanBody{tokens, terms, loss});
}

/// dlogits = dloss[0] (softmax(logits) - onehot(labels)) / tokens
/// (overwritten; moe_rt_cross_entropy_grad; dloss is a device scalar).
template <class X>
moe_rt_status crossEntropyBackward(X &x, int64_t tokens, int64_t vocab,
                                   const float *logits, const int64_t *labels,
                                   const float *dloss, float *dlogits) {
  int32_t code = 0;
  int32_t *word = dense::errorWordFor(
      x, "moe_rt_cross_entropy_grad: a label is outside the vocabulary", code);
  if (!word)
    return dense::noErrorWord(x);
  double *lse = scratchF64(x, tokens);
  if (!lse)
    return x.status();
  if (x.forEach(tokens, dense::TokenLseBody{vocab, logits, labels, false, lse,
                                            word, code}))
    return x.status();
  return x.forEach(tokens * vocab,
                   dense::CrossEntropyGradBody{tokens, vocab, logits, labels,
                                               lse, dloss, dlogits});
}

} // namespace moe_rt::device

#endif // MOE_RT_SRC_DEVICE_DENSEOPS_H
