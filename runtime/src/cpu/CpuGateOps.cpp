//===- CpuGateOps.cpp - every gate kind and its vjp as host tasks ---------===//
//
// Scores -> top-k (kernels/Gates.h, Routing.h) as one task; expert_choice
// selects the top-C tokens per expert instead (kernels/ExpertChoice.h, E x
// C outputs). The backward recomputes scores, selection and noise from x
// and the weights, so it needs nothing saved from the forward.
//
//===----------------------------------------------------------------------===//

#include "CpuOps.h"
#include "CpuTasks.h"

#include "kernels/ExpertChoice.h"
#include "kernels/Gates.h"

#include <string>
#include <vector>

namespace moe_rt::cpu {
namespace {
namespace k = moe_rt::kernels;

/// The forward's pre-top-k scores (tokens x E) and what the backward needs
/// again: the clean and noisy logits, the noise, the cosine projection.
struct Scores {
  std::vector<float> scores, clean, noisy, proj;
  std::vector<double> noise;
};

void computeScores(const GateShape &z, const float *x, const float *w,
                   const float *aux, Scores &r) {
  int64_t t = z.tokens, e = z.experts;
  r.scores.assign(t * e, 0.0f);
  switch (z.kind) {
  case MOE_RT_GATE_NOISY_TOPK:
    r.clean.assign(t * e, 0.0f);
    r.noisy.assign(t * e, 0.0f);
    k::linearForward(t, z.m, e, x, w, (const float *)nullptr, r.clean.data());
    k::linearForward(t, z.m, e, x, aux, (const float *)nullptr,
                     r.noisy.data());
    k::noiseFor(z.seed, t, z.seq, e, r.noise, z.firstSample);
    k::noisyScores(t * e, r.clean.data(), r.noisy.data(), r.noise,
                   r.scores.data());
    break;
  case MOE_RT_GATE_COSINE:
    r.proj.assign(t * z.d, 0.0f);
    k::linearForward(t, z.m, z.d, x, aux, (const float *)nullptr,
                     r.proj.data());
    k::cosineScores(t, z.d, e, z.tau, r.proj.data(), w, r.scores.data());
    break;
  default: // softmax_topk, sigmoid: plain logits
    k::linearForward(t, z.m, e, x, w, (const float *)nullptr,
                     r.scores.data());
  }
}

void topK(const GateShape &z, const float *scores, int64_t *indices,
          float *weights, int64_t *counts) {
  if (z.kind == MOE_RT_GATE_SIGMOID)
    k::sigmoidTopK(z.tokens, z.experts, z.k, z.normalize, scores, indices,
                   weights, counts);
  else
    k::softmaxTopK(z.tokens, z.experts, z.k, z.normalize, scores, indices,
                   weights, counts);
}

/// expert_choice's vjp: the softmax backward of the dweights of every slot
/// that picked a token, then the logits' linear backward.
void expertChoiceBackward(const GateShape &z, const float *x, const float *w,
                          const float *dweights, float *dx, float *dw,
                          const Scores &r) {
  int64_t t = z.tokens, e = z.experts, cap = z.k;
  std::vector<float> wts(e * cap), dlogits(t * e, 0.0f);
  std::vector<int64_t> idx(e * cap), counts(e);
  k::expertChoiceTopC(t, e, cap, r.scores.data(), idx.data(), wts.data(),
                      counts.data());
  k::expertChoiceBackward(t, e, cap, r.scores.data(), idx.data(), dweights,
                          dlogits.data());
  k::linearBackward(t, z.m, e, x, w, dlogits.data(), dx, dw,
                    (float *)nullptr);
}

/// A token-choice gate's vjp: top-k backward, then each kind's score
/// backward into dx, dw and daux.
void tokenChoiceBackward(const GateShape &z, const float *x, const float *w,
                         const float *aux, const float *dweights, float *dx,
                         float *dw, float *daux, const Scores &r) {
  int64_t t = z.tokens, e = z.experts, kk = z.k;
  std::vector<float> wts(t * kk), dscores(t * e, 0.0f);
  std::vector<int64_t> idx(t * kk), counts(e);
  topK(z, r.scores.data(), idx.data(), wts.data(), counts.data());
  if (z.kind == MOE_RT_GATE_SIGMOID)
    k::sigmoidTopKBackward(t, e, kk, z.normalize, r.scores.data(), idx.data(),
                           dweights, dscores.data());
  else
    k::softmaxTopKBackward(t, e, kk, z.normalize, r.scores.data(), idx.data(),
                           dweights, dscores.data());
  switch (z.kind) {
  case MOE_RT_GATE_NOISY_TOPK: {
    std::vector<float> dclean(t * e), dnoisy(t * e);
    k::noisyScoresBackward(t * e, r.noisy.data(), r.noise, dscores.data(),
                           dclean.data(), dnoisy.data());
    k::linearBackward(t, z.m, e, x, w, dclean.data(), dx, dw,
                      (float *)nullptr);
    k::linearBackward(t, z.m, e, x, aux, dnoisy.data(), dx, daux,
                      (float *)nullptr);
    break;
  }
  case MOE_RT_GATE_COSINE: {
    std::vector<float> dproj(t * z.d);
    k::cosineScoresBackward(t, z.d, e, z.tau, r.proj.data(), w,
                            dscores.data(), dproj.data(), dw);
    k::linearBackward(t, z.m, z.d, x, aux, dproj.data(), dx, daux,
                      (float *)nullptr);
    break;
  }
  default:
    k::linearBackward(t, z.m, e, x, w, dscores.data(), dx, dw,
                      (float *)nullptr);
  }
}

} // namespace

moe_rt_status gate(moe_rt_stream s, const GateShape &z, const moe_rt_tensor *x,
                   const moe_rt_tensor *w, const moe_rt_tensor *aux,
                   moe_rt_tensor *indices, moe_rt_tensor *weights,
                   moe_rt_tensor *counts) {
  return task(s, [=] {
    Scores r;
    computeScores(z, f32(x), f32(w), f32(aux), r);
    if (z.kind == MOE_RT_GATE_EXPERT_CHOICE)
      k::expertChoiceTopC(z.tokens, z.experts, z.k, r.scores.data(),
                          i64(indices), f32(weights), i64(counts));
    else
      topK(z, r.scores.data(), i64(indices), f32(weights), i64(counts));
  });
}

moe_rt_status gateGrad(moe_rt_stream s, const GateShape &z,
                       const moe_rt_tensor *x, const moe_rt_tensor *w,
                       const moe_rt_tensor *aux,
                       const moe_rt_tensor *dweights, moe_rt_tensor *dx,
                       moe_rt_tensor *dw, moe_rt_tensor *daux) {
  return task(s, [=] {
    Scores r;
    computeScores(z, f32(x), f32(w), f32(aux), r);
    zero(dx);
    zero(dw);
    zero(daux);
    if (z.kind == MOE_RT_GATE_EXPERT_CHOICE)
      expertChoiceBackward(z, f32(x), f32(w), f32(dweights), f32(dx), f32(dw),
                           r);
    else
      tokenChoiceBackward(z, f32(x), f32(w), f32(aux), f32(dweights), f32(dx),
                          f32(dw), f32(daux), r);
  });
}

} // namespace moe_rt::cpu
