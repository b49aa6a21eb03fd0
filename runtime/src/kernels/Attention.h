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
// recomputes the forward's intermediates from x (activation recomputation).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_ATTENTION_H
#define MOE_RT_KERNELS_ATTENTION_H

#include "ClipQkv.h"
#include "Dense.h"
#include "RotaryTable.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace moe_rt::kernels {

struct AttentionShape {
  int64_t batch, seq, embed, heads, kvHeads, headDim;
  bool causal = false, rotary = false;
  /// 0: no pre-norm, 1: LayerNorm, 2: RMSNorm.
  int norm = 0;
  double eps = 1e-5;
  /// Rotary base and lane pairing (moe.attention's theta and layout).
  double theta = 10000.0;
  bool interleaved = false;
  /// Clamp of Q, K, V to [-clip, clip] (moe.attention's clip_qkv); 0: none.
  double clip = 0.0;
};


/// The optional biases of the Q, K, V and output projections (null: none).
template <typename T> struct AttentionBias {
  const T *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
};
/// Their gradients (null: not wanted).
template <typename T> struct AttentionBiasGrad {
  T *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
};

namespace detail {

template <typename T> struct Activations {
  std::vector<T> xn, q, k, v, p, o; // per batch element
  /// Q, K, V before the clamp (kept only when there is one).
  std::vector<T> qRaw, kRaw, vRaw;
};

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

/// Forward of one sample; keeps what the backward needs in `act`.
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
  double inv = 1.0 / std::sqrt(double(d));
  act.p.assign(s.heads * n * n, T(0));
  act.o.assign(n * hd, T(0));
  for (int64_t h = 0; h < s.heads; ++h) {
    int64_t g = h / group;
    for (int64_t i = 0; i < n; ++i) {
      T *prow = act.p.data() + (h * n + i) * n;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        if (s.causal && j > i)
          continue;
        double dot = 0;
        for (int64_t e = 0; e < d; ++e)
          dot += act.q[i * hd + h * d + e] * act.k[j * kvd + g * d + e];
        prow[j] = T(dot * inv);
        mx = std::max(mx, double(prow[j]));
      }
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (s.causal && j > i) {
          prow[j] = T(0);
          continue;
        }
        prow[j] = T(std::exp(prow[j] - mx));
        sum += prow[j];
      }
      for (int64_t j = 0; j < n; ++j)
        prow[j] = T(prow[j] / sum);
      for (int64_t j = 0; j < n; ++j)
        for (int64_t e = 0; e < d; ++e)
          act.o[i * hd + h * d + e] += prow[j] * act.v[j * kvd + g * d + e];
    }
  }
  linearForward(n, hd, m, act.o.data(), wo, pb.o, out);
}

} // namespace detail

/// x, out: batch x seq x embed. scale/bias: the pre-norm's (null if none).
template <typename T>
void attentionForward(const AttentionShape &s, const T *x, const T *wq,
                      const T *wk, const T *wv, const T *wo, const T *scale,
                      const T *bias, T *out,
                      const AttentionBias<T> &pb = {}) {
  detail::Activations<T> act;
  for (int64_t b = 0; b < s.batch; ++b)
    detail::forwardSample(s, x + b * s.seq * s.embed, wq, wk, wv, wo, scale,
                          bias, pb, out + b * s.seq * s.embed, act);
}

/// Accumulates dx and every weight gradient (dscale/dbias may be null).
template <typename T>
void attentionBackward(const AttentionShape &s, const T *x, const T *wq,
                       const T *wk, const T *wv, const T *wo, const T *scale,
                       const T *bias, const T *dout, T *dx, T *dwq, T *dwk,
                       T *dwv, T *dwo, T *dscale, T *dbias,
                       const AttentionBias<T> &pb = {},
                       const AttentionBiasGrad<T> &dpb = {}) {
  int64_t n = s.seq, m = s.embed, hd = s.heads * s.headDim,
          kvd = s.kvHeads * s.headDim, d = s.headDim;
  int64_t group = s.heads / s.kvHeads;
  double inv = 1.0 / std::sqrt(double(d));
  detail::Activations<T> act;
  std::vector<T> out(n * m), dO(n * hd), dQ(n * hd), dK(n * kvd), dV(n * kvd),
      dxn(n * m), dp(n);
  for (int64_t b = 0; b < s.batch; ++b) {
    const T *xb = x + b * n * m, *db = dout + b * n * m;
    detail::forwardSample(s, xb, wq, wk, wv, wo, scale, bias, pb, out.data(),
                          act);
    // out = O Wo + bo.
    std::fill(dO.begin(), dO.end(), T(0));
    linearBackward(n, hd, m, act.o.data(), wo, db, dO.data(), dwo, dpb.o);
    std::fill(dQ.begin(), dQ.end(), T(0));
    std::fill(dK.begin(), dK.end(), T(0));
    std::fill(dV.begin(), dV.end(), T(0));
    for (int64_t h = 0; h < s.heads; ++h) {
      int64_t g = h / group;
      for (int64_t i = 0; i < n; ++i) {
        const T *prow = act.p.data() + (h * n + i) * n;
        // dP = dO V^T; dV += P^T dO.
        double rowDot = 0;
        for (int64_t j = 0; j < n; ++j) {
          double v = 0;
          for (int64_t e = 0; e < d; ++e) {
            v += dO[i * hd + h * d + e] * act.v[j * kvd + g * d + e];
            dV[j * kvd + g * d + e] += prow[j] * dO[i * hd + h * d + e];
          }
          dp[j] = T(v);
          rowDot += v * prow[j];
        }
        // Softmax: dS = P (dP - sum(dP P)); scores = Q K^T / sqrt(D).
        for (int64_t j = 0; j < n; ++j) {
          double ds = prow[j] * (dp[j] - rowDot) * inv;
          if (ds == 0)
            continue;
          for (int64_t e = 0; e < d; ++e) {
            dQ[i * hd + h * d + e] += T(ds * act.k[j * kvd + g * d + e]);
            dK[j * kvd + g * d + e] += T(ds * act.q[i * hd + h * d + e]);
          }
        }
      }
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
