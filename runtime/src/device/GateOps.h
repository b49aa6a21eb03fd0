//===- GateOps.h - the gate kinds and vjps, any executor --------*- C++ -*-===//
//
// moe_rt_gate / moe_rt_gate_grad for the CUDA backend, written over an
// executor (Device.h) so that CI runs the same code on the host against the
// CPU kernels (kernels/Routing.h, Gates.h, ExpertChoice.h). Same semantics as
// src/cpu/CpuGateOps.cpp:
//   scores:  softmax_topk / sigmoid  x·w
//            noisy_topk              x·w + n ⊙ softplus(x·W_noise)
//            cosine                  cos(x·W_proj, w[:, e]) / tau
//   top-k:   per token, the k largest (softmax probabilities, or σ for
//            sigmoid), ties to the lower expert index (the CPU's stable
//            sort), weights renormalised with `normalize`.
//   expert_choice: per expert, the C tokens of largest probability (ties to
//            the lower token id); indices/weights are E x C.
// The logits GEMMs go through X::gemm; everything per token is one body per
// token (E is small), its E-long rows in scratch (bodies cannot hold arrays
// of a runtime size). The backward recomputes scores, selection and noise
// from x, as the CPU does, so nothing is saved from the forward.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_DEVICE_GATEOPS_H
#define MOE_RT_SRC_DEVICE_GATEOPS_H

#include "Device.h"

#include "../OpShapes.h"

#include "moe_rt/ops.h"

#include <cmath>
#include <cstdint>

namespace moe_rt::device {

namespace gates {

// Device-callable copies of kernels/Gates.h's noise and activations. The
// kernels' inline functions call std:: math that nvcc does not offer in
// device code and kernels/ is host-only; these are the same expressions
// with the global (host = same libm call, device = CUDA's) math functions.
// DeviceRoutingTest checks that the copies agree bit for bit on the host.

MOE_HD inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

MOE_HD inline uint64_t positionHash(uint64_t seed, int64_t position) {
  return mix64(mix64(seed) ^ uint64_t(position));
}

MOE_HD inline uint64_t sampleSeed(uint64_t seed, int64_t sample) {
  return seed + uint64_t(sample) * 0x9E3779B97F4A7C15ull;
}

/// Token t's row hash: position t % seq of sample firstSample + t / seq.
MOE_HD inline uint64_t tokenHash(uint64_t seed, int64_t firstSample,
                                 int64_t seq, int64_t t) {
  return positionHash(sampleSeed(seed, firstSample + t / seq), t % seq);
}

MOE_HD inline double gateNoise(uint64_t rowH, int64_t expert) {
  uint64_t a = mix64(rowH ^ (uint64_t(expert) * 2 + 1));
  uint64_t b = mix64(a);
  double u1 = double((a >> 11) + 1) * 0x1.0p-53;
  double u2 = double(b >> 11) * 0x1.0p-53;
  return ::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586 * u2);
}

MOE_HD inline double softplus(double v) {
  return v > 20 ? v : ::log1p(::exp(v));
}
MOE_HD inline double sigmoid(double v) { return 1.0 / (1.0 + ::exp(-v)); }

constexpr double kCosineEps = 1e-12; // = kernels::kCosineEps

//===--- scores ------------------------------------------------------===//

/// p[t] = softmax(logits[t]) in double, as kernels::softmaxRow.
struct SoftmaxRows {
  int64_t E;
  const float *logits;
  double *p;
  MOE_HD void operator()(int64_t t) const {
    const float *row = logits + t * E;
    double *out = p + t * E;
    float mxf = row[0];
    for (int64_t e = 1; e < E; ++e)
      if (mxf < row[e]) // max_element: the first largest
        mxf = row[e];
    double mx = mxf, sum = 0;
    for (int64_t e = 0; e < E; ++e)
      sum += out[e] = ::exp(row[e] - mx);
    for (int64_t e = 0; e < E; ++e)
      out[e] /= sum;
  }
};

/// p = σ(logits), elementwise.
struct SigmoidScores {
  const float *logits;
  double *p;
  MOE_HD void operator()(int64_t i) const { p[i] = sigmoid(logits[i]); }
};

/// h = clean + n ⊙ softplus(noisy) over tokens x E; token t sits at
/// sequence position t % seq.
struct NoisyScores {
  int64_t E, seq;
  uint64_t seed;
  int64_t firstSample;
  const float *clean, *noisy;
  float *h;
  MOE_HD void operator()(int64_t i) const {
    int64_t t = i / E, e = i % E;
    double n = gateNoise(tokenHash(seed, firstSample, seq, t), e);
    h[i] = float(clean[i] + n * softplus(noisy[i]));
  }
};

/// d(noisy) = dh · n · σ(noisy) (d(clean) is dh itself).
struct NoisyScoresBack {
  int64_t E, seq;
  uint64_t seed;
  int64_t firstSample;
  const float *noisy, *dh;
  float *dnoisy;
  MOE_HD void operator()(int64_t i) const {
    int64_t t = i / E, e = i % E;
    double n = gateNoise(tokenHash(seed, firstSample, seq, t), e);
    dnoisy[i] = float(dh[i] * n * sigmoid(noisy[i]));
  }
};

/// wn[e] = max(|w[:, e]|, eps), w: d x E (one body per expert).
struct ColumnNorms {
  int64_t d, E;
  const float *w;
  double *wn;
  MOE_HD void operator()(int64_t e) const {
    double v = 0;
    for (int64_t i = 0; i < d; ++i)
      v += double(w[i * E + e]) * w[i * E + e];
    v = ::sqrt(v);
    wn[e] = v > kCosineEps ? v : kCosineEps;
  }
};

/// hn[t] = max(|h[t]|, eps), h: tokens x d.
struct RowNorms {
  int64_t d;
  const float *h;
  double *hn;
  MOE_HD void operator()(int64_t t) const {
    double v = 0;
    for (int64_t i = 0; i < d; ++i)
      v += double(h[t * d + i]) * h[t * d + i];
    v = ::sqrt(v);
    hn[t] = v > kCosineEps ? v : kCosineEps;
  }
};

/// cos[t, e] = <h_t, w_e> / (hn wn) in double; scores = float(cos / tau).
struct Cosines {
  int64_t d, E;
  double tau;
  const float *h, *w;
  const double *hn, *wn;
  double *cos;   // may be null (forward)
  float *scores; // may be null (backward)
  MOE_HD void operator()(int64_t i) const {
    int64_t t = i / E, e = i % E;
    double dot = 0;
    for (int64_t l = 0; l < d; ++l)
      dot += double(h[t * d + l]) * w[l * E + e];
    if (scores)
      scores[i] = float(dot / (hn[t] * wn[e]) / tau);
    if (cos)
      cos[i] = dot / (hn[t] * wn[e]);
  }
};

/// dh[t, l] = sum_e g (w_le / (hn wn) - c h_tl / hn^2), g = dscores / tau,
/// summed in float over e in order, as kernels::cosineScoresBackward.
struct CosineBackH {
  int64_t d, E;
  double tau;
  const float *h, *w, *dscores;
  const double *hn, *wn, *cos;
  float *dh;
  MOE_HD void operator()(int64_t i) const {
    int64_t t = i / d, l = i % d;
    float acc = dh[i];
    for (int64_t e = 0; e < E; ++e) {
      double g = dscores[t * E + e] / tau;
      if (g == 0)
        continue;
      double b = w[l * E + e];
      acc += float(g * (b / (hn[t] * wn[e]) - cos[t * E + e] * h[i] /
                                                  (hn[t] * hn[t])));
    }
    dh[i] = acc;
  }
};

/// dw[l, e] += sum_t g (h_tl / (hn wn) - c w_le / wn^2), over t in order.
struct CosineBackW {
  int64_t tokens, d, E;
  double tau;
  const float *h, *w, *dscores;
  const double *hn, *wn, *cos;
  float *dw;
  MOE_HD void operator()(int64_t i) const {
    int64_t l = i / E, e = i % E;
    float acc = dw[i];
    double b = w[i];
    for (int64_t t = 0; t < tokens; ++t) {
      double g = dscores[t * E + e] / tau;
      if (g == 0)
        continue;
      acc += float(g * (h[t * d + l] / (hn[t] * wn[e]) -
                        cos[t * E + e] * b / (wn[e] * wn[e])));
    }
    dw[i] = acc;
  }
};

//===--- selection ---------------------------------------------------===//

/// One token's top-k of its score row p (softmax probabilities or σ), in
/// the order of a stable descending sort: pick j is the best expert that
/// comes after pick j-1 in the order (score desc, index asc), so no
/// per-token list of taken experts is needed. Writes indices, weights and
/// adds to counts.
struct TopK {
  int64_t E, k;
  bool normalize;
  const double *p;
  int64_t *indices;
  float *weights;
  int64_t *counts;
  MOE_HD void operator()(int64_t t) const {
    const double *row = p + t * E;
    int64_t *idx = indices + t * k;
    int64_t prev = -1;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        if (prev >= 0 && !(row[e] < row[prev] ||
                           (row[e] == row[prev] && e > prev)))
          continue; // not after the previous pick
        if (best < 0 || row[e] > row[best])
          best = e;
      }
      if (best < 0) // NaN scores compare false: take the first unused
        for (int64_t e = 0; e < E && best < 0; ++e) {
          best = e;
          for (int64_t q = 0; q < j; ++q)
            if (idx[q] == e)
              best = -1;
        }
      idx[j] = prev = best;
    }
    double kept = 0;
    for (int64_t j = 0; j < k; ++j)
      kept += row[idx[j]];
    for (int64_t j = 0; j < k; ++j) {
      double v = row[idx[j]];
      weights[t * k + j] = float(normalize ? v / kept : v);
      atomicAddI64(counts + idx[j], 1);
    }
  }
};

/// kernels::softmaxTopKBackward for one token: dl (accumulated) from
/// dweights through the renormalisation and the softmax; dp is a zeroed
/// E-long scratch row of the token.
struct SoftmaxTopKBack {
  int64_t E, k;
  bool normalize;
  const double *p;
  const int64_t *indices;
  const float *dweights;
  double *dp;
  float *dl;
  MOE_HD void operator()(int64_t t) const {
    const double *pr = p + t * E;
    double *d = dp + t * E;
    const int64_t *idx = indices + t * k;
    const float *dw = dweights + t * k;
    double kept = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j)
      kept += pr[idx[j]];
    if (normalize) {
      for (int64_t j = 0; j < k; ++j)
        dot += dw[j] * pr[idx[j]] / kept;
      for (int64_t j = 0; j < k; ++j)
        d[idx[j]] = (dw[j] - dot) / kept;
    } else {
      for (int64_t j = 0; j < k; ++j)
        d[idx[j]] = dw[j];
    }
    double s = 0;
    for (int64_t e = 0; e < E; ++e)
      s += pr[e] * d[e];
    for (int64_t e = 0; e < E; ++e)
      dl[t * E + e] += float(pr[e] * (d[e] - s));
  }
};

/// kernels::sigmoidTopKBackward for one token (dl of the kept experts
/// written; the rest stays as zeroed).
struct SigmoidTopKBack {
  int64_t E, k;
  bool normalize;
  const float *logits;
  const int64_t *indices;
  const float *dweights;
  float *dl;
  MOE_HD void operator()(int64_t t) const {
    const int64_t *idx = indices + t * k;
    const float *dw = dweights + t * k;
    double kept = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j)
      kept += sigmoid(logits[t * E + idx[j]]);
    for (int64_t j = 0; j < k; ++j)
      dot += dw[j] * sigmoid(logits[t * E + idx[j]]) / kept;
    for (int64_t j = 0; j < k; ++j) {
      double s = sigmoid(logits[t * E + idx[j]]);
      double ds = normalize ? (dw[j] - dot) / kept : dw[j];
      dl[t * E + idx[j]] = float(ds * s * (1 - s));
    }
  }
};

//===--- expert choice -----------------------------------------------===//

/// Expert e's C tokens of largest p[:, e] (ties: lower token id), as
/// kernels::expertChoiceTopC: one body per (token, expert) counts the
/// tokens ranked before it; a rank < C is its slot.
struct ExpertChoiceRank {
  int64_t tokens, E, C;
  const double *p;
  int64_t *indices;
  float *weights;
  MOE_HD void operator()(int64_t i) const {
    int64_t t = i / E, e = i % E;
    double v = p[i];
    int64_t rank = 0;
    for (int64_t u = 0; u < tokens && rank < C; ++u) {
      double w = p[u * E + e];
      if (w > v || (w == v && u < t))
        ++rank;
    }
    if (rank < C) {
      indices[e * C + rank] = t;
      weights[e * C + rank] = float(v);
    }
  }
};

/// dS[:, e] = the sum of dweights[e, c] over e's slots holding each token,
/// in slot order (one body per expert: it owns column e).
struct ExpertChoiceGather {
  int64_t tokens, E, C;
  const int64_t *indices;
  const float *dweights;
  double *dS;
  MOE_HD void operator()(int64_t e) const {
    for (int64_t c = 0; c < C; ++c) {
      int64_t t = indices[e * C + c];
      if (t >= 0 && t < tokens)
        dS[t * E + e] += dweights[e * C + c];
    }
  }
};

/// The softmax Jacobian of one token (skipped when no expert picked it).
struct ExpertChoiceBack {
  int64_t E;
  const double *p, *dS;
  float *dl;
  MOE_HD void operator()(int64_t t) const {
    const double *d = dS + t * E, *pr = p + t * E;
    bool any = false;
    for (int64_t e = 0; e < E; ++e)
      any = any || d[e] != 0.0;
    if (!any)
      return;
    double s = 0;
    for (int64_t e = 0; e < E; ++e)
      s += pr[e] * d[e];
    for (int64_t e = 0; e < E; ++e)
      dl[t * E + e] += float(pr[e] * (d[e] - s));
  }
};

struct FillI64 {
  int64_t *p;
  int64_t v;
  MOE_HD void operator()(int64_t i) const { p[i] = v; }
};

} // namespace gates

//===--- ops -----------------------------------------------------------===//

/// What the forward computes before the selection and the backward needs
/// again (scratch of the executor).
struct GateScores {
  float *scores = nullptr;                  // tokens x E
  float *clean = nullptr, *noisy = nullptr; // noisy_topk: x·w, x·W_noise
  float *proj = nullptr;                    // cosine: x·W_proj, tokens x D
  double *hn = nullptr, *wn = nullptr;      // cosine norms
  double *p = nullptr; // selection scores: softmax (or σ) rows, tokens x E
};

/// Scores and selection scores of every kind (src/cpu/CpuGateOps.cpp's
/// computeScores, then the softmax / σ rows the top-k reads).
template <class X>
moe_rt_status gateScores(X &ex, const GateShape &z, const float *x,
                         const float *w, const float *aux, GateScores &r) {
  int64_t T = z.tokens, E = z.experts, M = z.m, D = z.d;
  r.scores = ex.scratchF32(T * E);
  r.p = scratchF64(ex, T * E);
  if (ex.status())
    return ex.status();
  switch (z.kind) {
  case MOE_RT_GATE_NOISY_TOPK:
    r.clean = ex.scratchF32(T * E);
    r.noisy = ex.scratchF32(T * E);
    if (ex.status())
      return ex.status();
    ex.gemm(gemmDesc(false, false, T, E, M, 1, x, w, 0, r.clean));
    ex.gemm(gemmDesc(false, false, T, E, M, 1, x, aux, 0, r.noisy));
    ex.forEach(T * E, gates::NoisyScores{E, z.seq, z.seed, z.firstSample,
                                         r.clean, r.noisy, r.scores});
    break;
  case MOE_RT_GATE_COSINE:
    r.proj = ex.scratchF32(T * D);
    r.hn = scratchF64(ex, T);
    r.wn = scratchF64(ex, E);
    if (ex.status())
      return ex.status();
    ex.gemm(gemmDesc(false, false, T, D, M, 1, x, aux, 0, r.proj));
    ex.forEach(E, gates::ColumnNorms{D, E, w, r.wn});
    ex.forEach(T, gates::RowNorms{D, r.proj, r.hn});
    ex.forEach(T * E, gates::Cosines{D, E, z.tau, r.proj, w, r.hn, r.wn,
                                     nullptr, r.scores});
    break;
  default: // softmax_topk, sigmoid, expert_choice: plain logits
    ex.gemm(gemmDesc(false, false, T, E, M, 1, x, w, 0, r.scores));
  }
  if (z.kind == MOE_RT_GATE_SIGMOID)
    ex.forEach(T * E, gates::SigmoidScores{r.scores, r.p});
  else
    ex.forEach(T, gates::SoftmaxRows{E, r.scores, r.p});
  return ex.status();
}

/// The selection: token choice writes tokens x k indices/weights and the
/// per-expert counts; expert_choice E x C (empty slots -1, counts = the
/// filled slots, C when C <= T).
template <class X>
moe_rt_status gateSelect(X &ex, const GateShape &z, const GateScores &r,
                         int64_t *indices, float *weights, int64_t *counts) {
  int64_t T = z.tokens, E = z.experts;
  if (z.kind == MOE_RT_GATE_EXPERT_CHOICE) {
    int64_t C = z.k;
    ex.forEach(E * C, gates::FillI64{indices, -1});
    ex.zero(weights, sizeof(float) * E * C);
    ex.forEach(T * E, gates::ExpertChoiceRank{T, E, C, r.p, indices, weights});
    ex.forEach(E, gates::FillI64{counts, C < T ? C : T});
    return ex.status();
  }
  ex.zero(counts, sizeof(int64_t) * E);
  ex.forEach(T, gates::TopK{E, z.k, z.normalize, r.p, indices, weights,
                            counts});
  return ex.status();
}

/// moe_rt_gate: indices and weights (tokens x k, or E x C for
/// expert_choice) and counts (E).
template <class X>
moe_rt_status gateForward(X &ex, const GateShape &z, const float *x,
                          const float *w, const float *aux, int64_t *indices,
                          float *weights, int64_t *counts) {
  GateScores r;
  if (gateScores(ex, z, x, w, aux, r))
    return ex.status();
  return gateSelect(ex, z, r, indices, weights, counts);
}

/// moe_rt_gate_grad: dweights -> dx, dw, daux (overwritten; daux only for
/// noisy_topk and cosine).
template <class X>
moe_rt_status gateBackward(X &ex, const GateShape &z, const float *x,
                           const float *w, const float *aux,
                           const float *dweights, float *dx, float *dw,
                           float *daux) {
  int64_t T = z.tokens, E = z.experts, M = z.m, D = z.d, k = z.k;
  bool ec = z.kind == MOE_RT_GATE_EXPERT_CHOICE;
  int64_t picks = ec ? E * k : T * k;
  GateScores r;
  if (gateScores(ex, z, x, w, aux, r))
    return ex.status();
  int64_t *idx = ex.scratchI64(picks), *counts = ex.scratchI64(E);
  float *wts = ex.scratchF32(picks), *dscores = ex.scratchF32(T * E);
  double *dp = scratchF64(ex, T * E);
  if (ex.status())
    return ex.status();
  if (gateSelect(ex, z, r, idx, wts, counts))
    return ex.status();
  if (ec) {
    ex.forEach(E, gates::ExpertChoiceGather{T, E, k, idx, dweights, dp});
    ex.forEach(T, gates::ExpertChoiceBack{E, r.p, dp, dscores});
  } else if (z.kind == MOE_RT_GATE_SIGMOID) {
    ex.forEach(T, gates::SigmoidTopKBack{E, k, z.normalize, r.scores, idx,
                                         dweights, dscores});
  } else {
    ex.forEach(T, gates::SoftmaxTopKBack{E, k, z.normalize, r.p, idx,
                                         dweights, dp, dscores});
  }
  // Zeroed, then accumulated (beta = 1), as the CPU op: a GEMM over zero
  // tokens then leaves zeros whatever its backend does with k = 0.
  ex.zero(dx, sizeof(float) * T * M);
  ex.zero(dw, sizeof(float) * (z.kind == MOE_RT_GATE_COSINE ? D : M) * E);
  if (daux)
    ex.zero(daux, sizeof(float) * M * (z.kind == MOE_RT_GATE_COSINE ? D : E));
  switch (z.kind) {
  case MOE_RT_GATE_NOISY_TOPK: {
    float *dnoisy = ex.scratchF32(T * E);
    if (ex.status())
      return ex.status();
    ex.forEach(T * E, gates::NoisyScoresBack{E, z.seq, z.seed, z.firstSample,
                                             r.noisy, dscores, dnoisy});
    // d(clean) = dscores: dx = dclean w^T + dnoisy W_noise^T.
    ex.gemm(gemmDesc(false, true, T, M, E, 1, dscores, w, 1, dx));
    ex.gemm(gemmDesc(true, false, M, E, T, 1, x, dscores, 1, dw));
    ex.gemm(gemmDesc(false, true, T, M, E, 1, dnoisy, aux, 1, dx));
    ex.gemm(gemmDesc(true, false, M, E, T, 1, x, dnoisy, 1, daux));
    break;
  }
  case MOE_RT_GATE_COSINE: {
    float *dproj = ex.scratchF32(T * D);
    double *cos = scratchF64(ex, T * E);
    if (ex.status())
      return ex.status();
    ex.forEach(T * E, gates::Cosines{D, E, z.tau, r.proj, w, r.hn, r.wn, cos,
                                     nullptr});
    ex.forEach(T * D, gates::CosineBackH{D, E, z.tau, r.proj, w, dscores,
                                         r.hn, r.wn, cos, dproj});
    ex.forEach(D * E, gates::CosineBackW{T, D, E, z.tau, r.proj, w, dscores,
                                         r.hn, r.wn, cos, dw});
    ex.gemm(gemmDesc(false, true, T, M, D, 1, dproj, aux, 1, dx));
    ex.gemm(gemmDesc(true, false, M, D, T, 1, x, dproj, 1, daux));
    break;
  }
  default:
    ex.gemm(gemmDesc(false, true, T, M, E, 1, dscores, w, 1, dx));
    ex.gemm(gemmDesc(true, false, M, E, T, 1, x, dscores, 1, dw));
  }
  return ex.status();
}

} // namespace moe_rt::device

#endif // MOE_RT_SRC_DEVICE_GATEOPS_H
