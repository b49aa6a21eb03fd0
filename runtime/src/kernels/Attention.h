//===- Attention.h - multi-head / grouped-query attention -------*- C++ -*-===//
//
// moe.attention on the CPU, forward and backward: optional pre-norm, Q, K, V
// projections, rotary embeddings, scaled dot-product attention (causal or
// not) with num_heads query heads sharing num_kv_heads key/value heads, and
// the output projection. The residual add is not part of the op.
//
// Rotary embeddings turn lane pair j by pos * theta^(-2j/D), pairing lanes
// (j, j + D/2) (rotate-half: HF LLaMA / GPT-NeoX) or (2j, 2j + 1)
// (interleaved: GPT-J, Meta's LLaMA), from cos/sin tables built once per
// (seq, D, theta) (RotaryTable.h). Optional biases are added to the Q, K, V
// projections (before rotary) and to the output projection. An optional
// clamp (DBRX's clip_qkv) bounds the Q, K, V projections, biases included,
// to [-clip, clip] before rotary; its gradient is zero where a projection
// lies outside the range (torch.clamp's: the bounds themselves pass). The
// backward
// recomputes the forward's intermediates from x (activation recomputation)
// unless the forward kept them (AttentionKept).
//
// Per head, the score, value and gradient products are BLAS GEMMs on the
// head's columns of the token-major Q/K/V (leading dimension H*D or KV*D):
// S = Q_h K_g^T / sqrt(D), O_h = P V_g, dP = dO_h V_g^T, dV_g += P^T dO_h,
// dQ_h += dS K_g, dK_g += dS^T Q_h, with g = h / (H/KV). The softmax and its
// gradient run on Eigen packets row by row; a causal row i covers j <= i
// only and its masked entries are exact zeros, so the full-size GEMMs add
// nothing from them. (These were scalar double loops: ~56% of a 1-rank
// step, issue 12.)
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_ATTENTION_H
#define MOE_RT_KERNELS_ATTENTION_H

#include "AttentionShape.h"
#include "ClipQkv.h"
#include "Dense.h"
#include "RotaryTable.h"

#include <Eigen/Core>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace moe_rt::kernels {

namespace detail {

template <typename T> struct Activations {
  std::vector<T> xn, q, k, v, p, o; // per batch element
  /// Q, K, V before the clamp (kept only when there is one).
  std::vector<T> qRaw, kRaw, vRaw;
};

template <typename T> using Row = Eigen::Array<T, Eigen::Dynamic, 1>;

/// Each row i of the n x n scores `p` becomes softmax over j < len(i)
/// (len = i + 1 if causal, else n); entries past len are set to 0.
template <typename T> void softmaxRows(int64_t n, bool causal, T *p) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t len = causal ? i + 1 : n;
    Eigen::Map<Row<T>> row(p + i * n, len);
    row = (row - row.maxCoeff()).exp();
    row /= row.sum();
    std::fill(p + i * n + len, p + (i + 1) * n, T(0));
  }
}

/// dp (n x n, dP = dO V^T) becomes dS = P * (dP - rowsum(dP * P)) * inv,
/// the gradient of the scaled scores (softmax's vjp).
template <typename T>
void softmaxRowsGrad(int64_t n, const T *p, T inv, T *dp) {
  for (int64_t i = 0; i < n; ++i) {
    Eigen::Map<const Row<T>> prow(p + i * n, n);
    Eigen::Map<Row<T>> drow(dp + i * n, n);
    T dot = (prow * drow).sum();
    drow = prow * (drow - dot) * inv;
  }
}

/// Clamps `v` in place, keeping its values before the clamp in `raw`.
template <typename T>
void clampKeeping(double clip, std::vector<T> &v, std::vector<T> &raw) {
  raw = v;
  for (T &x : v)
    x = clipValue(clip, x);
}

/// Zeroes the gradient where the clamp cut the projection.
template <typename T>
void clampGrad(double clip, const std::vector<T> &raw, std::vector<T> &grad) {
  for (size_t i = 0; i < grad.size(); ++i)
    if (!clipPasses(clip, raw[i]))
      grad[i] = T(0);
}

/// Forward of one sample; keeps what the backward needs in `act`. A null
/// `out` skips the output projection (the backward needs only O).
template <typename T>
void forwardSample(const AttentionShape &s, const T *x, const T *wq,
                   const T *wk, const T *wv, const T *wo, const T *scale,
                   const T *bias, const AttentionBias<T> &pb, T *out,
                   Activations<T> &act) {
  int64_t n = s.seq, m = s.embed, hd = s.heads * s.headDim,
          kvd = s.kvHeads * s.headDim, d = s.headDim;
  act.xn.assign(n * m, T(0));
  if (s.norm)
    normForward(s.norm == 2, n, m, x, scale, bias, s.eps, act.xn.data());
  else
    std::copy(x, x + n * m, act.xn.begin());
  act.q.assign(n * hd, T(0));
  act.k.assign(n * kvd, T(0));
  act.v.assign(n * kvd, T(0));
  linearForward(n, m, hd, act.xn.data(), wq, pb.q, act.q.data());
  linearForward(n, m, kvd, act.xn.data(), wk, pb.k, act.k.data());
  linearForward(n, m, kvd, act.xn.data(), wv, pb.v, act.v.data());
  if (s.clip > 0) {
    clampKeeping(s.clip, act.q, act.qRaw);
    clampKeeping(s.clip, act.k, act.kRaw);
    clampKeeping(s.clip, act.v, act.vRaw);
  }
  if (s.rotary) {
    auto table = rotaryTable(n, d, s.theta);
    for (int64_t t = 0; t < n; ++t) {
      rotaryApply(*table, s.interleaved, act.q.data() + t * hd, s.heads, d, t,
                  false);
      rotaryApply(*table, s.interleaved, act.k.data() + t * kvd, s.kvHeads, d,
                  t, false);
    }
  }
  int64_t group = s.heads / s.kvHeads;
  T inv = T(1.0 / std::sqrt(double(d)));
  act.p.assign(s.heads * n * n, T(0));
  act.o.assign(n * hd, T(0));
  for (int64_t h = 0; h < s.heads; ++h) {
    int64_t g = h / group;
    T *p = act.p.data() + h * n * n;
    gemm(false, true, n, n, d, inv, act.q.data() + h * d, hd,
         act.k.data() + g * d, kvd, T(0), p, n);
    softmaxRows(n, s.causal, p);
    gemm(false, false, n, d, n, T(1), p, n, act.v.data() + g * d, kvd, T(0),
         act.o.data() + h * d, hd);
  }
  if (out)
    linearForward(n, hd, m, act.o.data(), wo, pb.o, out);
}

} // namespace detail

/// The intermediates of a forward, one per sample, for its backward.
template <typename T> using AttentionKept = std::vector<detail::Activations<T>>;

/// x, out: batch x seq x embed. scale/bias: the pre-norm's (null if none).
/// With `keep`, each sample's intermediates stay there for the backward.
template <typename T>
void attentionForward(const AttentionShape &s, const T *x, const T *wq,
                      const T *wk, const T *wv, const T *wo, const T *scale,
                      const T *bias, T *out, const AttentionBias<T> &pb = {},
                      AttentionKept<T> *keep = nullptr) {
  detail::Activations<T> scratch;
  if (keep)
    keep->resize(s.batch);
  for (int64_t b = 0; b < s.batch; ++b)
    detail::forwardSample(s, x + b * s.seq * s.embed, wq, wk, wv, wo, scale,
                          bias, pb, out + b * s.seq * s.embed,
                          keep ? (*keep)[b] : scratch);
}

/// Accumulates dx and every weight gradient (dscale/dbias may be null).
/// `kept`: the forward's intermediates (else recomputed, the same bits).
template <typename T>
void attentionBackward(const AttentionShape &s, const T *x, const T *wq,
                       const T *wk, const T *wv, const T *wo, const T *scale,
                       const T *bias, const T *dout, T *dx, T *dwq, T *dwk,
                       T *dwv, T *dwo, T *dscale, T *dbias,
                       const AttentionBias<T> &pb = {},
                       const AttentionBiasGrad<T> &dpb = {},
                       const AttentionKept<T> *kept = nullptr) {
  int64_t n = s.seq, m = s.embed, hd = s.heads * s.headDim,
          kvd = s.kvHeads * s.headDim, d = s.headDim;
  int64_t group = s.heads / s.kvHeads;
  T inv = T(1.0 / std::sqrt(double(d)));
  detail::Activations<T> recomputed;
  std::vector<T> dO(n * hd), dQ(n * hd), dK(n * kvd), dV(n * kvd),
      dxn(n * m), dS(n * n);
  for (int64_t b = 0; b < s.batch; ++b) {
    const T *xb = x + b * n * m, *db = dout + b * n * m;
    if (!kept)
      detail::forwardSample(s, xb, wq, wk, wv, wo, scale, bias, pb,
                            static_cast<T *>(nullptr), recomputed);
    const detail::Activations<T> &act = kept ? (*kept)[b] : recomputed;
    // out = O Wo + bo.
    std::fill(dO.begin(), dO.end(), T(0));
    linearBackward(n, hd, m, act.o.data(), wo, db, dO.data(), dwo, dpb.o);
    std::fill(dQ.begin(), dQ.end(), T(0));
    std::fill(dK.begin(), dK.end(), T(0));
    std::fill(dV.begin(), dV.end(), T(0));
    for (int64_t h = 0; h < s.heads; ++h) {
      int64_t g = h / group;
      const T *p = act.p.data() + h * n * n;
      const T *dOh = dO.data() + h * d;
      gemm(false, true, n, n, d, T(1), dOh, hd, act.v.data() + g * d, kvd,
           T(0), dS.data(), n);
      gemm(true, false, n, d, n, T(1), p, n, dOh, hd, T(1), dV.data() + g * d,
           kvd);
      detail::softmaxRowsGrad(n, p, inv, dS.data());
      gemm(false, false, n, d, n, T(1), dS.data(), n, act.k.data() + g * d,
           kvd, T(1), dQ.data() + h * d, hd);
      gemm(true, false, n, d, n, T(1), dS.data(), n, act.q.data() + h * d, hd,
           T(1), dK.data() + g * d, kvd);
    }
    if (s.rotary) {
      auto table = rotaryTable(n, d, s.theta);
      for (int64_t t = 0; t < n; ++t) {
        rotaryApply(*table, s.interleaved, dQ.data() + t * hd, s.heads, d, t,
                    true);
        rotaryApply(*table, s.interleaved, dK.data() + t * kvd, s.kvHeads, d,
                    t, true);
      }
    }
    if (s.clip > 0) { // the clamp sits between the projections and rotary
      detail::clampGrad(s.clip, act.qRaw, dQ);
      detail::clampGrad(s.clip, act.kRaw, dK);
      detail::clampGrad(s.clip, act.vRaw, dV);
    }
    std::fill(dxn.begin(), dxn.end(), T(0));
    linearBackward(n, m, hd, act.xn.data(), wq, dQ.data(), dxn.data(), dwq,
                   dpb.q);
    linearBackward(n, m, kvd, act.xn.data(), wk, dK.data(), dxn.data(), dwk,
                   dpb.k);
    linearBackward(n, m, kvd, act.xn.data(), wv, dV.data(), dxn.data(), dwv,
                   dpb.v);
    T *dxb = dx + b * n * m;
    if (s.norm)
      normBackward(s.norm == 2, n, m, xb, scale, s.eps, dxn.data(), dxb, dscale,
                   dbias);
    else
      for (int64_t i = 0; i < n * m; ++i)
        dxb[i] += dxn[i];
  }
}

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_ATTENTION_H
