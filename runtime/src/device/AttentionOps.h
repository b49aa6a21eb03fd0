//===- AttentionOps.h - attention over an executor --------------*- C++ -*-===//
//
// moe.attention for the CUDA backend, written over an executor X (see
// Device.h) with the semantics of kernels/Attention.h: optional pre-norm,
// Q/K/V projections (optional biases), rotary embeddings (rotate-half or
// interleaved, angle pos * theta^(-2j/D)), scaled dot-product attention
// with `heads` query heads sharing `kvHeads` key/value heads (GQA), causal
// or not, and the output projection (optional bias), with the optional clamp
// of Q, K, V (clip_qkv, before rotary; zero gradient outside the range).
// The backward recomputes the forward from x, as the CPU
// kernel does, and OVERWRITES its gradients (as moe_rt_attention_grad).
//
// Layout: activations are token-major (B*N rows of H*D or KV*D); scores
// and probabilities are [chunk][H][N][N] for a chunk of the batch bounded
// by kMaxScoreElements. Every matmul is one X::gemm: the projections treat
// B*N as the row count (weights are shared), and the per-head products are
// one strided-batched GEMM per head over the chunk's samples (query head h
// reads key/value head h / (H/KV), so batching over heads would need
// two-level strides under GQA). Softmax, its gradient and rotary are one
// forEach each.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_DEVICE_ATTENTIONOPS_H
#define MOE_RT_SRC_DEVICE_ATTENTIONOPS_H

#include "DenseOps.h"

#include "kernels/AttentionShape.h"
#include "kernels/ClipQkv.h"

#include <cmath>
#include <cstdint>

namespace moe_rt::device {

namespace attn {

/// Rotates (inverse: by the negative angle, the adjoint used for
/// gradients) the lane pairs of every head of every token: (j, j + D/2)
/// (rotate-half) or (2j, 2j + 1) (interleaved), by pos * theta^(-2j/D);
/// one thread per (token, head, j < D/2). rows = B*N tokens, pos = token %
/// N. The angle is computed per thread (cheap on a GPU; the CPU kernel
/// reads a cached table, kernels/RotaryTable.h, with the same values).
struct RotaryBody {
  float *v;
  int64_t seq, heads, d;
  bool inverse;
  double theta;
  bool interleaved;
  MOE_HD void operator()(int64_t idx) const {
    int64_t half = d / 2;
    int64_t j = idx % half, h = (idx / half) % heads, t = idx / (half * heads);
    int64_t pos = t % seq;
    double angle = pos * ::pow(theta, -2.0 * j / d);
    double c = ::cos(angle), s = inverse ? -::sin(angle) : ::sin(angle);
    float *row = v + t * heads * d + h * d;
    int64_t p = interleaved ? 2 * j : j, q = interleaved ? 2 * j + 1 : j + half;
    float x = row[p], y = row[q];
    row[p] = float(x * c - y * s);
    row[q] = float(y * c + x * s);
  }
};

/// The clamp of a projection (clip_qkv), one thread per value: keeps the
/// value before the clamp in `raw` (the backward's mask) and clamps `v`.
struct ClampKeepBody {
  float *v, *raw;
  double clip;
  MOE_HD void operator()(int64_t i) const {
    raw[i] = v[i];
    v[i] = kernels::clipValue(clip, v[i]);
  }
};

/// The clamp's vjp in place: the gradient is zero where the projection lay
/// outside [-clip, clip] (kernels::clipPasses, as torch.clamp).
struct ClampGradBody {
  const float *raw;
  float *grad;
  double clip;
  MOE_HD void operator()(int64_t i) const {
    if (!kernels::clipPasses(clip, raw[i]))
      grad[i] = 0;
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

/// Default bound on the floats of one [samples][H][N][N] score buffer
/// (1 GiB): the per-head products run over chunks of the batch small
/// enough to fit it (at least one sample), so memory does not grow with the
/// batch, and GEMM launches grow only with batch / chunk.
constexpr int64_t kMaxScoreElements = int64_t(1) << 28;

/// Sizes derived from the shape.
struct Dims {
  int64_t rows, n, m, d, hd, kvd, group, nn, pStride;
  explicit Dims(const kernels::AttentionShape &s)
      : rows(s.batch * s.seq), n(s.seq), m(s.embed), d(s.headDim),
        hd(s.heads * s.headDim), kvd(s.kvHeads * s.headDim),
        group(s.heads / s.kvHeads), nn(s.seq * s.seq),
        pStride(s.heads * s.seq * s.seq) {}
};

/// Samples per chunk of the per-head products.
inline int64_t chunkSamples(const kernels::AttentionShape &s,
                            int64_t maxScoreElements) {
  int64_t perSample = s.heads * s.seq * s.seq;
  int64_t c = perSample > 0 ? maxScoreElements / perSample : s.batch;
  return c < 1 ? 1 : (c > s.batch ? s.batch : c);
}

/// The forward's intermediates (device scratch, or x itself for xn when
/// there is no pre-norm). p holds the probabilities of `chunk` samples
/// starting at sample pFirst.
struct Activations {
  const float *xn = nullptr;
  float *q = nullptr, *k = nullptr, *v = nullptr, *p = nullptr, *o = nullptr;
  /// Q, K, V before the clamp (only with clip_qkv).
  float *qRaw = nullptr, *kRaw = nullptr, *vRaw = nullptr;
  int64_t chunk = 1, pFirst = -1;
};

/// p = softmax(Q K^T / sqrt(D)) (causal-masked) for samples [b0, b0 + nb):
/// per head h, one GEMM batched over those samples.
template <class X>
moe_rt_status probabilities(X &x, const kernels::AttentionShape &s,
                            Activations &a, int64_t b0, int64_t nb) {
  Dims z(s);
  float inv = float(1.0 / ::sqrt(double(z.d)));
  const float *q = a.q + b0 * z.n * z.hd, *k = a.k + b0 * z.n * z.kvd;
  for (int64_t h = 0; h < s.heads; ++h) {
    int64_t g = h / z.group;
    // S_bh = Q_bh K_bg^T / sqrt(D).
    if (dense::gemmInto(
            x, stridedGemm(false, true, z.n, z.n, z.d, inv, q + h * z.d,
                                  z.hd, z.n * z.hd, k + g * z.d, z.kvd,
                                  z.n * z.kvd, 0, a.p + h * z.nn, z.n,
                                  z.pStride, nb)))
      return x.status();
  }
  if (x.forEach(nb * s.heads * z.n, SoftmaxRowsBody{a.p, z.n, s.causal}))
    return x.status();
  a.pFirst = b0;
  return x.status();
}

/// Runs the forward up to O (before the output projection).
template <class X>
moe_rt_status forwardToO(X &x, const kernels::AttentionShape &s,
                         const float *in, const float *wq, const float *wk,
                         const float *wv, const float *scale,
                         const float *bias, int64_t maxScoreElements,
                         const kernels::AttentionBias<float> &pb,
                         Activations &a) {
  using dense::gemmInto;
  Dims z(s);
  if (s.norm) {
    float *xn = x.scratchF32(z.rows * z.m);
    if (!xn || normForward(x, s.norm == 2, z.rows, z.m, in, scale, bias,
                           s.eps, xn))
      return x.status();
    a.xn = xn;
  } else {
    a.xn = in;
  }
  a.chunk = chunkSamples(s, maxScoreElements);
  a.q = x.scratchF32(z.rows * z.hd);
  a.k = x.scratchF32(z.rows * z.kvd);
  a.v = x.scratchF32(z.rows * z.kvd);
  a.p = x.scratchF32(a.chunk * z.pStride);
  a.o = x.scratchF32(z.rows * z.hd);
  if (!a.q || !a.k || !a.v || !a.p || !a.o)
    return x.status();
  if (gemmInto(x, gemmDesc(false, false, z.rows, z.hd, z.m, 1, a.xn, wq, 0,
                           a.q)) ||
      gemmInto(x, gemmDesc(false, false, z.rows, z.kvd, z.m, 1, a.xn, wk, 0,
                           a.k)) ||
      gemmInto(x, gemmDesc(false, false, z.rows, z.kvd, z.m, 1, a.xn, wv, 0,
                           a.v)))
    return x.status();
  if ((pb.q &&
       x.forEach(z.rows * z.hd, dense::AddBiasBody{a.q, pb.q, z.hd})) ||
      (pb.k &&
       x.forEach(z.rows * z.kvd, dense::AddBiasBody{a.k, pb.k, z.kvd})) ||
      (pb.v &&
       x.forEach(z.rows * z.kvd, dense::AddBiasBody{a.v, pb.v, z.kvd})))
    return x.status();
  if (s.clip > 0) {
    a.qRaw = x.scratchF32(z.rows * z.hd);
    a.kRaw = x.scratchF32(z.rows * z.kvd);
    a.vRaw = x.scratchF32(z.rows * z.kvd);
    if (!a.qRaw || !a.kRaw || !a.vRaw ||
        x.forEach(z.rows * z.hd, ClampKeepBody{a.q, a.qRaw, s.clip}) ||
        x.forEach(z.rows * z.kvd, ClampKeepBody{a.k, a.kRaw, s.clip}) ||
        x.forEach(z.rows * z.kvd, ClampKeepBody{a.v, a.vRaw, s.clip}))
      return x.status();
  }
  if (s.rotary && z.d / 2 > 0 &&
      (x.forEach(z.rows * s.heads * (z.d / 2),
                 RotaryBody{a.q, z.n, s.heads, z.d, false, s.theta,
                            s.interleaved}) ||
       x.forEach(z.rows * s.kvHeads * (z.d / 2),
                 RotaryBody{a.k, z.n, s.kvHeads, z.d, false, s.theta,
                            s.interleaved})))
    return x.status();
  for (int64_t b0 = 0; b0 < s.batch; b0 += a.chunk) {
    int64_t nb = s.batch - b0 < a.chunk ? s.batch - b0 : a.chunk;
    if (probabilities(x, s, a, b0, nb))
      return x.status();
    const float *v = a.v + b0 * z.n * z.kvd;
    float *o = a.o + b0 * z.n * z.hd;
    for (int64_t h = 0; h < s.heads; ++h) {
      int64_t g = h / z.group;
      // O_bh = P_bh V_bg.
      if (gemmInto(x, stridedGemm(false, false, z.n, z.d, z.n, 1,
                                         a.p + h * z.nn, z.n, z.pStride,
                                         v + g * z.d, z.kvd, z.n * z.kvd, 0,
                                         o + h * z.d, z.hd, z.n * z.hd, nb)))
        return x.status();
    }
  }
  return x.status();
}

/// dQ, dK, dV (before rotary's adjoint) of samples [b0, b0 + nb) from dO;
/// dK and dV start zeroed: the heads of a group add up in stream order.
template <class X>
moe_rt_status backwardChunk(X &x, const kernels::AttentionShape &s,
                            Activations &a, const float *dOAll, float *dP,
                            float *dQAll, float *dKAll, float *dVAll,
                            int64_t b0, int64_t nb) {
  using dense::gemmInto;
  Dims z(s);
  if (a.pFirst != b0 && probabilities(x, s, a, b0, nb))
    return x.status();
  int64_t tokenQ = b0 * z.n * z.hd, tokenKv = b0 * z.n * z.kvd;
  const float *q = a.q + tokenQ, *k = a.k + tokenKv, *v = a.v + tokenKv,
              *dO = dOAll + tokenQ;
  float *dQ = dQAll + tokenQ, *dK = dKAll + tokenKv, *dV = dVAll + tokenKv;
  for (int64_t h = 0; h < s.heads; ++h) {
    int64_t g = h / z.group;
    // dP_bh = dO_bh V_bg^T;  dV_bg += P_bh^T dO_bh.
    if (gemmInto(x, stridedGemm(false, true, z.n, z.n, z.d, 1, dO + h * z.d,
                                z.hd, z.n * z.hd, v + g * z.d, z.kvd,
                                z.n * z.kvd, 0, dP + h * z.nn, z.n, z.pStride,
                                nb)) ||
        gemmInto(x, stridedGemm(true, false, z.n, z.d, z.n, 1, a.p + h * z.nn,
                                z.n, z.pStride, dO + h * z.d, z.hd,
                                z.n * z.hd, 1, dV + g * z.d, z.kvd,
                                z.n * z.kvd, nb)))
      return x.status();
  }
  if (x.forEach(nb * s.heads * z.n,
                SoftmaxGradRowsBody{a.p, dP, z.n, 1.0 / ::sqrt(double(z.d))}))
    return x.status();
  for (int64_t h = 0; h < s.heads; ++h) {
    int64_t g = h / z.group;
    // dQ_bh = dS_bh K_bg;  dK_bg += dS_bh^T Q_bh.
    if (gemmInto(x, stridedGemm(false, false, z.n, z.d, z.n, 1, dP + h * z.nn,
                                z.n, z.pStride, k + g * z.d, z.kvd,
                                z.n * z.kvd, 0, dQ + h * z.d, z.hd,
                                z.n * z.hd, nb)) ||
        gemmInto(x, stridedGemm(true, false, z.n, z.d, z.n, 1, dP + h * z.nn,
                                z.n, z.pStride, q + h * z.d, z.hd, z.n * z.hd,
                                1, dK + g * z.d, z.kvd, z.n * z.kvd, nb)))
      return x.status();
  }
  return x.status();
}

} // namespace attn

/// out = attention(x) (moe_rt_attention); x, out: batch x seq x embed;
/// scale/bias: the pre-norm's (bias may be null). maxScoreElements bounds
/// the score workspace (tests lower it to exercise the batch chunks).
template <class X>
moe_rt_status
attentionForward(X &x, const kernels::AttentionShape &s, const float *in,
                 const float *wq, const float *wk, const float *wv,
                 const float *wo, const float *scale, const float *bias,
                 float *out,
                 int64_t maxScoreElements = attn::kMaxScoreElements,
                 const kernels::AttentionBias<float> &pb = {}) {
  attn::Activations a;
  if (attn::forwardToO(x, s, in, wq, wk, wv, scale, bias, maxScoreElements,
                       pb, a))
    return x.status();
  int64_t rows = s.batch * s.seq, hd = s.heads * s.headDim;
  return linearForward(x, rows, hd, s.embed, a.o, wo, pb.o, out);
}

/// dx and every weight gradient, overwritten (moe_rt_attention_grad).
/// dscale/dbias may be null; they are zeroed when there is no pre-norm.
template <class X>
moe_rt_status
attentionBackward(X &x, const kernels::AttentionShape &s, const float *in,
                  const float *wq, const float *wk, const float *wv,
                  const float *wo, const float *scale, const float *bias,
                  const float *dout, float *dx, float *dwq, float *dwk,
                  float *dwv, float *dwo, float *dscale, float *dbias,
                  int64_t maxScoreElements = attn::kMaxScoreElements,
                  const kernels::AttentionBias<float> &pb = {},
                  const kernels::AttentionBiasGrad<float> &dpb = {}) {
  using dense::gemmInto;
  attn::Activations a;
  if (attn::forwardToO(x, s, in, wq, wk, wv, scale, bias, maxScoreElements,
                       pb, a))
    return x.status();
  attn::Dims z(s);
  int64_t rows = z.rows, m = z.m, hd = z.hd, kvd = z.kvd, d = z.d, n = z.n;
  float *dO = x.scratchF32(rows * hd), *dP = x.scratchF32(a.chunk * z.pStride),
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
  // The chunk the forward left in p (the last) first, so that it is not
  // recomputed; then chunks 0, 1, ... up to the one before it.
  const int64_t last = a.pFirst;
  for (int64_t c = 0; c < s.batch; c += a.chunk) {
    int64_t b0 = c == 0 ? last : c - a.chunk;
    int64_t nb = s.batch - b0 < a.chunk ? s.batch - b0 : a.chunk;
    if (attn::backwardChunk(x, s, a, dO, dP, dQ, dK, dV, b0, nb))
      return x.status();
  }
  if (s.rotary && d / 2 > 0 &&
      (x.forEach(rows * s.heads * (d / 2),
                 attn::RotaryBody{dQ, n, s.heads, d, true, s.theta,
                                  s.interleaved}) ||
       x.forEach(rows * s.kvHeads * (d / 2),
                 attn::RotaryBody{dK, n, s.kvHeads, d, true, s.theta,
                                  s.interleaved})))
    return x.status();
  // The clamp sits between the projections (biases included) and rotary.
  if (s.clip > 0 &&
      (x.forEach(rows * hd, attn::ClampGradBody{a.qRaw, dQ, s.clip}) ||
       x.forEach(rows * kvd, attn::ClampGradBody{a.kRaw, dK, s.clip}) ||
       x.forEach(rows * kvd, attn::ClampGradBody{a.vRaw, dV, s.clip})))
    return x.status();
  // The biases' gradients: column sums of dout, dQ, dK, dV (the latter
  // after rotary's adjoint: the biases are added before rotary).
  using dense::ColumnSumBody;
  if ((dpb.o && x.forEach(m, ColumnSumBody{dout, rows, m, dpb.o})) ||
      (dpb.q && x.forEach(hd, ColumnSumBody{dQ, rows, hd, dpb.q})) ||
      (dpb.k && x.forEach(kvd, ColumnSumBody{dK, rows, kvd, dpb.k})) ||
      (dpb.v && x.forEach(kvd, ColumnSumBody{dV, rows, kvd, dpb.v})))
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
