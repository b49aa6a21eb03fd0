//===- AttentionOps.h - attention over an executor -------------*- C++ -*-===//
//
// moe.attention for the CUDA backend, written over an executor X (see
// Device.h) with the semantics of kernels/Attention.h: optional pre-norm,
// Q/K/V projections, rotary embeddings (rotate-half, angle
// pos * 10000^(-2i/D)), scaled dot-product attention with `heads` query
// heads sharing `kvHeads` key/value heads (GQA), causal or not, and the
// output projection. The backward recomputes the forward from x, as the CPU
// kernel does, and OVERWRITES its gradients (as moe_rt_attention_grad).
//
// Layout: activations are token-major (B*N rows of H*D or KV*D); scores
// and probabilities are [B][H][N][N]. Every matmul is one X::gemm: the
// projections treat B*N as the row count (weights are shared), and the
// per-head products are one strided-batched GEMM per head over the batch
// (query head h reads key/value head h / (H/KV), so batching over heads
// would need two-level strides under GQA). Softmax, its gradient and
// rotary are one forEach each.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_DEVICE_ATTENTIONOPS_H
#define MOE_RT_SRC_DEVICE_ATTENTIONOPS_H

#include "DenseOps.h"

#include "moe_rt/kernels/Attention.h"

#include <cmath>
#include <cstdint>

namespace moe_rt::device {

namespace attn {

/// Rotates (inverse: by the negative angle, the adjoint used for
/// gradients) the pairs (i, i + D/2) of every head of every token; one
/// thread per (token, head, i < D/2). rows = B*N tokens, pos = token % N.
struct RotaryBody {
  float *v;
  int64_t seq, heads, d;
  bool inverse;
  MOE_HD void operator()(int64_t idx) const {
    int64_t half = d / 2;
    int64_t i = idx % half, h = (idx / half) % heads, t = idx / (half * heads);
    int64_t pos = t % seq;
    double angle = pos * ::pow(10000.0, -2.0 * i / d);
    double c = ::cos(angle), s = inverse ? -::sin(angle) : ::sin(angle);
    float *row = v + t * heads * d + h * d;
    float x = row[i], y = row[i + half];
    row[i] = float(x * c - y * s);
    row[i + half] = float(y * c + x * s);
  }
};

/// In place, one thread per score row (b, h, i) of [B][H][N][N]: the
/// (already scaled) scores become softmax probabilities; under a causal
/// mask the columns j > i get 0. Rounds to float where the CPU kernel does.
struct SoftmaxRowsBody {
  float *p;
  int64_t n;
  bool causal;
  MOE_HD void operator()(int64_t r) const {
    int64_t i = r % n, limit = causal ? i + 1 : n;
    float *row = p + r * n;
    double mx = row[0];
    for (int64_t j = 1; j < limit; ++j)
      mx = row[j] > mx ? row[j] : mx;
    double sum = 0;
    for (int64_t j = 0; j < limit; ++j) {
      row[j] = float(::exp(row[j] - mx));
      sum += row[j];
    }
    for (int64_t j = 0; j < limit; ++j)
      row[j] = float(row[j] / sum);
    for (int64_t j = limit; j < n; ++j)
      row[j] = 0;
  }
};

/// In place on dP, one thread per row: dS = P (dP - sum_j dP P) * scale,
/// the softmax's vjp times the score scale 1/sqrt(D).
struct SoftmaxGradRowsBody {
  const float *p;
  float *dp;
  int64_t n;
  double scale;
  MOE_HD void operator()(int64_t r) const {
    const float *prow = p + r * n;
    float *drow = dp + r * n;
    double rowDot = 0;
    for (int64_t j = 0; j < n; ++j)
      rowDot += double(drow[j]) * prow[j];
    for (int64_t j = 0; j < n; ++j)
      drow[j] = float(prow[j] * (drow[j] - rowDot) * scale);
  }
};

/// The forward's intermediates (device scratch, or x itself for xn when
/// there is no pre-norm).
struct Activations {
  const float *xn = nullptr;
  float *q = nullptr, *k = nullptr, *v = nullptr, *p = nullptr, *o = nullptr;
};

/// Runs the forward up to O (before the output projection).
template <class X>
moe_rt_status forwardToO(X &x, const kernels::AttentionShape &s,
                         const float *in, const float *wq, const float *wk,
                         const float *wv, const float *scale,
                         const float *bias, Activations &a) {
  using dense::gemmInto;
  using dense::stridedGemm;
  int64_t rows = s.batch * s.seq, n = s.seq, m = s.embed, d = s.headDim,
          hd = s.heads * d, kvd = s.kvHeads * d, group = s.heads / s.kvHeads;
  if (s.norm) {
    float *xn = x.scratchF32(rows * m);
    if (!xn || normForward(x, s.norm == 2, rows, m, in, scale, bias, s.eps, xn))
      return x.status();
    a.xn = xn;
  } else {
    a.xn = in;
  }
  a.q = x.scratchF32(rows * hd);
  a.k = x.scratchF32(rows * kvd);
  a.v = x.scratchF32(rows * kvd);
  a.p = x.scratchF32(s.batch * s.heads * n * n);
  a.o = x.scratchF32(rows * hd);
  if (!a.q || !a.k || !a.v || !a.p || !a.o)
    return x.status();
  if (gemmInto(x, gemmDesc(false, false, rows, hd, m, 1, a.xn, wq, 0, a.q)) ||
      gemmInto(x, gemmDesc(false, false, rows, kvd, m, 1, a.xn, wk, 0, a.k)) ||
      gemmInto(x, gemmDesc(false, false, rows, kvd, m, 1, a.xn, wv, 0, a.v)))
    return x.status();
  if (s.rotary && d / 2 > 0 &&
      (x.forEach(rows * s.heads * (d / 2),
                 RotaryBody{a.q, n, s.heads, d, false}) ||
       x.forEach(rows * s.kvHeads * (d / 2),
                 RotaryBody{a.k, n, s.kvHeads, d, false})))
    return x.status();
  float inv = float(1.0 / ::sqrt(double(d)));
  int64_t nn = n * n, pStride = s.heads * nn;
  for (int64_t h = 0; h < s.heads; ++h) {
    int64_t g = h / group;
    // S_bh = Q_bh K_bg^T / sqrt(D), batched over b.
    if (gemmInto(x, stridedGemm(false, true, n, n, d, inv, a.q + h * d, hd,
                                n * hd, a.k + g * d, kvd, n * kvd, 0,
                                a.p + h * nn, n, pStride, s.batch)))
      return x.status();
  }
  if (x.forEach(s.batch * s.heads * n, SoftmaxRowsBody{a.p, n, s.causal}))
    return x.status();
  for (int64_t h = 0; h < s.heads; ++h) {
    int64_t g = h / group;
    // O_bh = P_bh V_bg.
    if (gemmInto(x, stridedGemm(false, false, n, d, n, 1, a.p + h * nn, n,
                                pStride, a.v + g * d, kvd, n * kvd, 0,
                                a.o + h * d, hd, n * hd, s.batch)))
      return x.status();
  }
  return x.status();
}

} // namespace attn

/// out = attention(x) (moe_rt_attention); x, out: batch x seq x embed;
/// scale/bias: the pre-norm's (bias may be null).
template <class X>
moe_rt_status attentionForward(X &x, const kernels::AttentionShape &s,
                               const float *in, const float *wq,
                               const float *wk, const float *wv,
                               const float *wo, const float *scale,
                               const float *bias, float *out) {
  using dense::gemmInto;
  attn::Activations a;
  if (attn::forwardToO(x, s, in, wq, wk, wv, scale, bias, a))
    return x.status();
  int64_t rows = s.batch * s.seq, hd = s.heads * s.headDim;
  return gemmInto(
      x, gemmDesc(false, false, rows, s.embed, hd, 1, a.o, wo, 0, out));
}

/// dx and every weight gradient, overwritten (moe_rt_attention_grad).
/// dscale/dbias may be null; they are zeroed when there is no pre-norm.
template <class X>
moe_rt_status
attentionBackward(X &x, const kernels::AttentionShape &s, const float *in,
                  const float *wq, const float *wk, const float *wv,
                  const float *wo, const float *scale, const float *bias,
                  const float *dout, float *dx, float *dwq, float *dwk,
                  float *dwv, float *dwo, float *dscale, float *dbias) {
  using dense::gemmInto;
  using dense::stridedGemm;
  attn::Activations a;
  if (attn::forwardToO(x, s, in, wq, wk, wv, scale, bias, a))
    return x.status();
  int64_t rows = s.batch * s.seq, n = s.seq, m = s.embed, d = s.headDim,
          hd = s.heads * d, kvd = s.kvHeads * d, group = s.heads / s.kvHeads;
  int64_t nn = n * n, pStride = s.heads * nn;
  float *dO = x.scratchF32(rows * hd), *dP = x.scratchF32(s.batch * pStride),
        *dQ = x.scratchF32(rows * hd), *dK = x.scratchF32(rows * kvd),
        *dV = x.scratchF32(rows * kvd);
  // Without a pre-norm the input gradient is dx itself.
  float *dxn = s.norm ? x.scratchF32(rows * m) : dx;
  if (!dO || !dP || !dQ || !dK || !dV || !dxn)
    return x.status();
  // out = O Wo: dO = dout Wo^T, dWo = O^T dout (summed over the batch).
  if (gemmInto(x, gemmDesc(false, true, rows, hd, m, 1, dout, wo, 0, dO)) ||
      gemmInto(x, gemmDesc(true, false, hd, m, rows, 1, a.o, dout, 0, dwo)))
    return x.status();
  for (int64_t h = 0; h < s.heads; ++h) {
    int64_t g = h / group;
    // dP_bh = dO_bh V_bg^T;  dV_bg += P_bh^T dO_bh (heads of a group add
    // up: dV starts zeroed, and the GEMMs run in stream order).
    if (gemmInto(x, stridedGemm(false, true, n, n, d, 1, dO + h * d, hd,
                                n * hd, a.v + g * d, kvd, n * kvd, 0,
                                dP + h * nn, n, pStride, s.batch)) ||
        gemmInto(x, stridedGemm(true, false, n, d, n, 1, a.p + h * nn, n,
                                pStride, dO + h * d, hd, n * hd, 1, dV + g * d,
                                kvd, n * kvd, s.batch)))
      return x.status();
  }
  if (x.forEach(s.batch * s.heads * n,
                attn::SoftmaxGradRowsBody{a.p, dP, n, 1.0 / ::sqrt(double(d))}))
    return x.status();
  for (int64_t h = 0; h < s.heads; ++h) {
    int64_t g = h / group;
    // dQ_bh = dS_bh K_bg;  dK_bg += dS_bh^T Q_bh.
    if (gemmInto(x, stridedGemm(false, false, n, d, n, 1, dP + h * nn, n,
                                pStride, a.k + g * d, kvd, n * kvd, 0,
                                dQ + h * d, hd, n * hd, s.batch)) ||
        gemmInto(x, stridedGemm(true, false, n, d, n, 1, dP + h * nn, n,
                                pStride, a.q + h * d, hd, n * hd, 1,
                                dK + g * d, kvd, n * kvd, s.batch)))
      return x.status();
  }
  if (s.rotary && d / 2 > 0 &&
      (x.forEach(rows * s.heads * (d / 2),
                 attn::RotaryBody{dQ, n, s.heads, d, true}) ||
       x.forEach(rows * s.kvHeads * (d / 2),
                 attn::RotaryBody{dK, n, s.kvHeads, d, true})))
    return x.status();
  // dxn = dQ Wq^T + dK Wk^T + dV Wv^T; dW* = xn^T d*.
  if (gemmInto(x, gemmDesc(false, true, rows, m, hd, 1, dQ, wq, 0, dxn)) ||
      gemmInto(x, gemmDesc(false, true, rows, m, kvd, 1, dK, wk, 1, dxn)) ||
      gemmInto(x, gemmDesc(false, true, rows, m, kvd, 1, dV, wv, 1, dxn)) ||
      gemmInto(x, gemmDesc(true, false, m, hd, rows, 1, a.xn, dQ, 0, dwq)) ||
      gemmInto(x, gemmDesc(true, false, m, kvd, rows, 1, a.xn, dK, 0, dwk)) ||
      gemmInto(x, gemmDesc(true, false, m, kvd, rows, 1, a.xn, dV, 0, dwv)))
    return x.status();
  if (s.norm)
    return normBackward(x, s.norm == 2, rows, m, in, scale, s.eps, dxn, dx,
                        dscale, dbias);
  // No pre-norm: its gradients (if the caller passed them) are zero.
  if (dscale)
    x.zero(dscale, sizeof(float) * size_t(m));
  if (dbias)
    x.zero(dbias, sizeof(float) * size_t(m));
  return x.status();
}

} // namespace moe_rt::device

#endif // MOE_RT_SRC_DEVICE_ATTENTIONOPS_H
