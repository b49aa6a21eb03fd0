//===- Gates.h - token-choice gates: scores, top-k, vjp ---------*- C++ -*-===//
//
// The moe.gate kinds other than softmax_topk (Routing.h has that one), as
// "scores -> top-k -> weights" over T tokens and E experts:
//  - noisyScores (noisy_topk, GShard/Shazeer): h = x·W + n ⊙ softplus(x·Wn),
//    then softmaxTopK on h. n ~ N(0,1) is a pure function of (seed, the
//    token's sample in the step's batch, its sequence position, expert):
//    the backward recomputes exactly the forward's noise, and micro-batching
//    (R, which splits the batch; each part passes the index of its first
//    sample) never changes it. Runners draw a fresh seed per training step
//    (moe_rt_gate_step_seed, ops.h), so the noise changes from step to step.
//  - sigmoidTopK (sigmoid, BASE/StableMoE): s = σ(x·W); keep the k largest;
//    the weight is s itself (or s / sum of kept s with `normalize`).
//  - cosineScores (cosine, X-MoE): h = x·Wp (d), score_e = cos(h, W[:, e])/τ,
//    then softmaxTopK on the scores.
// Ties break to the lower expert index everywhere (stable sort).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_GATES_H
#define MOE_RT_KERNELS_GATES_H

#include "Routing.h"


namespace moe_rt::kernels {

/// splitmix64 finaliser: a good 64-bit mix, cheap and portable (the PyTorch
/// reference, python/torch_reference.py, reimplements it bit for bit).
inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The hash a token's noise is drawn from: the seed and the token's
/// position along the sequence. Not the row of x: a float64 reference (or
/// any other summation order) would round x differently and redraw all of
/// it. The sample enters through sampleSeed.
inline uint64_t positionHash(uint64_t seed, int64_t position) {
  return mix64(mix64(seed) ^ uint64_t(position));
}

/// The seed of sample `sample` of the step's batch: splitmix64's own
/// stream (state + i * golden gamma), so sample 0 keeps `seed` itself and
/// samples draw independent noise. `sample` counts over the whole batch the
/// gate's graph was written for (micro-batch r passes r * B/R as its first
/// sample), so splitting the batch never changes a token's noise.
inline uint64_t sampleSeed(uint64_t seed, int64_t sample) {
  return seed + uint64_t(sample) * 0x9E3779B97F4A7C15ull;
}

/// The standard normal sample of (row hash, expert): Box-Muller on two
/// 53-bit uniforms, u1 in (0, 1] so the log is finite.
inline double gateNoise(uint64_t rowH, int64_t expert) {
  uint64_t a = mix64(rowH ^ (uint64_t(expert) * 2 + 1));
  uint64_t b = mix64(a);
  double u1 = double((a >> 11) + 1) * 0x1.0p-53;
  double u2 = double(b >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

/// noise: tokens x experts N(0,1) samples; token t is position t % seqLen
/// of sample firstSample + t / seqLen (x is ... x seqLen x M, row-major).
inline void noiseFor(uint64_t seed, int64_t tokens, int64_t seqLen,
                     int64_t experts, std::vector<double> &noise,
                     int64_t firstSample = 0) {
  noise.resize(tokens * experts);
  for (int64_t t = 0; t < tokens; ++t) {
    uint64_t h = positionHash(sampleSeed(seed, firstSample + t / seqLen),
                              t % seqLen);
    for (int64_t e = 0; e < experts; ++e)
      noise[t * experts + e] = gateNoise(h, e);
  }
}

inline double softplus(double v) {
  return v > 20 ? v : std::log1p(std::exp(v));
}
inline double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

/// h = clean + noise ⊙ softplus(noisy) (all tokens x experts).
inline void noisyScores(int64_t n, const float *clean, const float *noisy,
                        const std::vector<double> &noise, float *h) {
  for (int64_t i = 0; i < n; ++i)
    h[i] = float(clean[i] + noise[i] * softplus(noisy[i]));
}

/// d(h) -> d(clean) = dh, d(noisy) = dh · noise · σ(noisy) (overwritten).
inline void noisyScoresBackward(int64_t n, const float *noisy,
                                const std::vector<double> &noise,
                                const float *dh, float *dclean,
                                float *dnoisy) {
  for (int64_t i = 0; i < n; ++i) {
    dclean[i] = dh[i];
    dnoisy[i] = float(dh[i] * noise[i] * sigmoid(noisy[i]));
  }
}

/// sigmoid gate on logits (tokens x experts).
inline void sigmoidTopK(int64_t tokens, int64_t experts, int64_t k,
                        bool normalize, const float *logits, int64_t *indices,
                        float *weights, int64_t *counts) {
  std::fill(counts, counts + experts, 0);
  std::vector<double> s(experts);
  std::vector<int64_t> order(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < experts; ++e)
      s[e] = sigmoid(logits[t * experts + e]);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return s[a] > s[b]; });
    double kept = 0;
    for (int64_t j = 0; j < k; ++j)
      kept += s[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      indices[t * k + j] = order[j];
      weights[t * k + j] = float(normalize ? s[order[j]] / kept : s[order[j]]);
      ++counts[order[j]];
    }
  }
}

/// d(weights) -> d(logits), overwritten (zero for experts not kept).
inline void sigmoidTopKBackward(int64_t tokens, int64_t experts, int64_t k,
                                bool normalize, const float *logits,
                                const int64_t *indices, const float *dweights,
                                float *dlogits) {
  std::fill(dlogits, dlogits + tokens * experts, 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t *idx = indices + t * k;
    const float *dw = dweights + t * k;
    double kept = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j)
      kept += sigmoid(logits[t * experts + idx[j]]);
    // With normalize, w_j = s_j / S: ds_j = (dw_j - sum_i dw_i w_i) / S.
    for (int64_t j = 0; j < k; ++j)
      dot += dw[j] * sigmoid(logits[t * experts + idx[j]]) / kept;
    for (int64_t j = 0; j < k; ++j) {
      double s = sigmoid(logits[t * experts + idx[j]]);
      double ds = normalize ? (dw[j] - dot) / kept : dw[j];
      dlogits[t * experts + idx[j]] = float(ds * s * (1 - s));
    }
  }
}

/// Why a norm is clamped: a zero projection or expert column would make
/// the cosine 0/0; 1e-12 keeps it finite (and its gradient bounded).
constexpr double kCosineEps = 1e-12;

/// scores[t, e] = <h_t, w_e> / (|h_t| |w_e|) / tau; h: tokens x d, w: d x E.
inline void cosineScores(int64_t tokens, int64_t d, int64_t experts,
                         double tau, const float *h, const float *w,
                         float *scores) {
  std::vector<double> wn(experts, 0.0);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t e = 0; e < experts; ++e)
      wn[e] += double(w[i * experts + e]) * w[i * experts + e];
  for (double &v : wn)
    v = std::max(std::sqrt(v), kCosineEps);
  for (int64_t t = 0; t < tokens; ++t) {
    double hn = 0;
    for (int64_t i = 0; i < d; ++i)
      hn += double(h[t * d + i]) * h[t * d + i];
    hn = std::max(std::sqrt(hn), kCosineEps);
    for (int64_t e = 0; e < experts; ++e) {
      double dot = 0;
      for (int64_t i = 0; i < d; ++i)
        dot += double(h[t * d + i]) * w[i * experts + e];
      scores[t * experts + e] = float(dot / (hn * wn[e]) / tau);
    }
  }
}

/// d(scores) -> dh (tokens x d, overwritten) and dw (d x E, accumulated):
/// for c = <a, b>/(|a||b|), dc/da = b/(|a||b|) - c a/|a|^2, and alike for b.
inline void cosineScoresBackward(int64_t tokens, int64_t d, int64_t experts,
                                 double tau, const float *h, const float *w,
                                 const float *dscores, float *dh, float *dw) {
  std::vector<double> wn(experts, 0.0);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t e = 0; e < experts; ++e)
      wn[e] += double(w[i * experts + e]) * w[i * experts + e];
  for (double &v : wn)
    v = std::max(std::sqrt(v), kCosineEps);
  std::fill(dh, dh + tokens * d, 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    const float *a = h + t * d;
    double hn = 0;
    for (int64_t i = 0; i < d; ++i)
      hn += double(a[i]) * a[i];
    hn = std::max(std::sqrt(hn), kCosineEps);
    for (int64_t e = 0; e < experts; ++e) {
      double g = dscores[t * experts + e] / tau;
      if (g == 0)
        continue;
      double dot = 0;
      for (int64_t i = 0; i < d; ++i)
        dot += double(a[i]) * w[i * experts + e];
      double c = dot / (hn * wn[e]);
      for (int64_t i = 0; i < d; ++i) {
        double b = w[i * experts + e];
        dh[t * d + i] += float(g * (b / (hn * wn[e]) - c * a[i] / (hn * hn)));
        dw[i * experts + e] +=
            float(g * (a[i] / (hn * wn[e]) - c * b / (wn[e] * wn[e])));
      }
    }
  }
}

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_GATES_H
