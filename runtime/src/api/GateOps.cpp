//===- GateOps.cpp - moe_rt_gate and its vjp: every gate kind
//--------------===//
//
// Argument checks, then scores -> top-k (kernels/Gates.h, Routing.h) as a
// stream task; expert_choice selects top-C tokens per expert instead
// (kernels/ExpertChoice.h, E x C outputs). The backward recomputes scores,
// selection and noise from x and the weights, so it needs nothing saved
// from the forward.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/ops.h"

#include "OpChecks.h"

#include "kernels/ExpertChoice.h"
#include "kernels/Gates.h"

#if MOE_RT_HAVE_CUDA
#include "../cuda/CudaRoutingOps.h"
#endif

#include <string>
#include <vector>

using namespace moe_rt;
namespace k = moe_rt::kernels;

namespace {

/// The gate's sizes once its checks passed: T tokens of M features, E
/// experts, D the cosine projection width (M for the other kinds), seq the
/// sequence length (x's second-to-last dimension; noisy_topk's noise
/// varies along it).
struct Sizes {
  int64_t t, m, e, d, seq;
};

bool hasAux(moe_rt_gate_kind kind) {
  return kind == MOE_RT_GATE_NOISY_TOPK || kind == MOE_RT_GATE_COSINE;
}

/// What moe_rt_gate and its vjp both check: the kind, x, w, aux and k.
Check gateKindChecks(const char *call, moe_rt_stream s, moe_rt_gate_kind kind,
                     int64_t kk, double tau, const moe_rt_tensor *x,
                     const moe_rt_tensor *w, const moe_rt_tensor *aux,
                     Sizes &z) {
  Check c{call, backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .that(kind >= MOE_RT_GATE_SOFTMAX_TOPK &&
                kind <= MOE_RT_GATE_EXPERT_CHOICE,
            "unknown gate kind " + std::to_string(int(kind)))
      .tensor(x, "x", MOE_RT_F32, 1)
      .tensor(w, "w", MOE_RT_F32, 2)
      .tensor(aux, "aux", MOE_RT_F32, 2, true);
  if (c.status)
    return c;
  c.that(w->rank == 2, "w must be 2-D")
      .that(hasAux(kind) == (aux != nullptr),
            hasAux(kind) ? "this gate kind needs its aux weight"
                         : "this gate kind takes no aux weight")
      .that(kind != MOE_RT_GATE_COSINE || tau > 0, "cosine needs tau > 0");
  if (c.status)
    return c;
  z.m = dim(x, -1);
  z.t = moe_rt_tensor_numel(x) / (z.m ? z.m : 1);
  z.e = dim(w, 1);
  z.d = z.m;
  z.seq = x->rank >= 2 ? dim(x, -2) : 1;
  if (kind == MOE_RT_GATE_COSINE) {
    c.that(aux->rank == 2 && dim(aux, 0) == z.m,
           "cosine's W_proj must be M x d, M x's last dimension")
        .that(aux->rank != 2 || dim(w, 0) == dim(aux, 1),
              "cosine's w must be d x E, d W_proj's columns");
    if (aux->rank == 2)
      z.d = dim(aux, 1);
  } else {
    c.that(dim(w, 0) == z.m, "w's rows must match x's last dimension");
    if (aux)
      c.that(aux->rank == 2 && dim(aux, 0) == z.m && dim(aux, 1) == z.e,
             "noisy_topk's W_noise must be M x E, like w");
  }
  return c.that(kk >= 1 && kk <= z.e, "k must be in [1, E]");
}

/// expert_choice's routing tensor `r` (indices, weights or dweights) is
/// E x C; C, the capacity, is its second dimension and must be in [1, T]
/// (an expert cannot pick more tokens than the call has). Sets `cap`.
Check &expertChoiceChecks(Check &c, const Sizes &z, int normalize,
                          const moe_rt_tensor *r, const char *name,
                          int64_t &cap) {
  c.that(normalize == 0, "expert_choice takes no normalize")
      .that(r->rank == 2 && dim(r, 0) == z.e,
            std::string("expert_choice's ") + name +
                " must be E x C (E = w's columns)");
  if (c.status)
    return c;
  cap = dim(r, 1);
  return c.that(cap >= 1 && cap <= z.t,
                "expert_choice's capacity C (" + std::string(name) +
                    "' second dimension, " + std::to_string(cap) +
                    ") must be in [1, T], T = " + std::to_string(z.t) +
                    " tokens");
}

/// The forward's pre-top-k scores (tokens x E) and what the backward needs
/// again: the clean and noisy logits, the noise, the cosine projection.
struct Scores {
  std::vector<float> scores, clean, noisy, proj;
  std::vector<double> noise;
};

void computeScores(moe_rt_gate_kind kind, const Sizes &z, uint64_t seed,
                   int64_t firstSample, double tau, const float *x,
                   const float *w, const float *aux, Scores &r) {
  r.scores.assign(z.t * z.e, 0.0f);
  switch (kind) {
  case MOE_RT_GATE_NOISY_TOPK:
    r.clean.assign(z.t * z.e, 0.0f);
    r.noisy.assign(z.t * z.e, 0.0f);
    k::linearForward(z.t, z.m, z.e, x, w, (const float *)nullptr,
                     r.clean.data());
    k::linearForward(z.t, z.m, z.e, x, aux, (const float *)nullptr,
                     r.noisy.data());
    k::noiseFor(seed, z.t, z.seq, z.e, r.noise, firstSample);
    k::noisyScores(z.t * z.e, r.clean.data(), r.noisy.data(), r.noise,
                   r.scores.data());
    break;
  case MOE_RT_GATE_COSINE:
    r.proj.assign(z.t * z.d, 0.0f);
    k::linearForward(z.t, z.m, z.d, x, aux, (const float *)nullptr,
                     r.proj.data());
    k::cosineScores(z.t, z.d, z.e, tau, r.proj.data(), w, r.scores.data());
    break;
  default: // softmax_topk, sigmoid: plain logits
    k::linearForward(z.t, z.m, z.e, x, w, (const float *)nullptr,
                     r.scores.data());
  }
}

void topK(moe_rt_gate_kind kind, const Sizes &z, int64_t kk, bool normalize,
          const float *scores, int64_t *indices, float *weights,
          int64_t *counts) {
  if (kind == MOE_RT_GATE_SIGMOID)
    k::sigmoidTopK(z.t, z.e, kk, normalize, scores, indices, weights, counts);
  else
    k::softmaxTopK(z.t, z.e, kk, normalize, scores, indices, weights, counts);
}

#if MOE_RT_HAVE_CUDA
/// The CUDA gate's description of a checked call; `k` is the capacity C
/// for expert_choice.
device::GateShape deviceGate(moe_rt_gate_kind kind, const Sizes &z, int64_t k,
                             int normalize, uint64_t seed, int64_t first,
                             double tau) {
  device::GateShape g;
  g.kind = kind;
  g.tokens = z.t;
  g.m = z.m;
  g.experts = z.e;
  g.d = z.d;
  g.seq = z.seq;
  g.k = k;
  g.normalize = normalize != 0;
  g.seed = seed;
  g.firstSample = first;
  g.tau = tau;
  return g;
}
#endif

} // namespace

uint64_t moe_rt_gate_step_seed(uint64_t base, int64_t step) {
  return k::mix64(k::mix64(base) ^ uint64_t(step));
}

moe_rt_status moe_rt_gate(moe_rt_stream s, moe_rt_gate_kind kind, int64_t kk,
                          int normalize, uint64_t seed, double tau,
                          const moe_rt_tensor *x, const moe_rt_tensor *w,
                          const moe_rt_tensor *aux, moe_rt_tensor *indices,
                          moe_rt_tensor *weights, moe_rt_tensor *counts) {
  return moe_rt_gate_at(s, kind, kk, normalize, seed, 0, tau, x, w, aux,
                        indices, weights, counts);
}

moe_rt_status moe_rt_gate_at(moe_rt_stream s, moe_rt_gate_kind kind,
                             int64_t kk, int normalize, uint64_t seed,
                             int64_t first, double tau, const moe_rt_tensor *x,
                             const moe_rt_tensor *w, const moe_rt_tensor *aux,
                             moe_rt_tensor *indices, moe_rt_tensor *weights,
                             moe_rt_tensor *counts) {
  Sizes z{};
  Check c = gateKindChecks("moe_rt_gate", s, kind, kk, tau, x, w, aux, z);
  c.that(first >= 0, "first_sample must not be negative");
  c.tensor(indices, "indices", MOE_RT_I64)
      .tensor(weights, "weights", MOE_RT_F32)
      .tensor(counts, "counts", MOE_RT_I64);
  if (c.status)
    return c.status;
  if (kind == MOE_RT_GATE_EXPERT_CHOICE) {
    int64_t cap = 0;
    expertChoiceChecks(c, z, normalize, indices, "indices", cap)
        .size(weights, "weights", z.e * cap)
        .size(counts, "counts", z.e);
    if (c.status)
      return c.status;
    MOE_RT_ON_CUDA(s,
                   cuda::gate(s, deviceGate(kind, z, cap, normalize, seed, first, tau),
                              f32(x), f32(w), f32(aux), i64(indices),
                              f32(weights), i64(counts)));
    return enqueue(s, [=](std::string &) {
      Scores r;
      computeScores(kind, z, seed, first, tau, f32(x), f32(w), f32(aux), r);
      k::expertChoiceTopC(z.t, z.e, cap, r.scores.data(), i64(indices),
                          f32(weights), i64(counts));
      return MOE_RT_OK;
    });
  }
  c.size(indices, "indices", z.t * kk)
      .size(weights, "weights", z.t * kk)
      .size(counts, "counts", z.e);
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::gate(s, deviceGate(kind, z, kk, normalize, seed, first, tau),
                               f32(x), f32(w), f32(aux), i64(indices),
                               f32(weights), i64(counts)));
  bool norm = normalize != 0;
  return enqueue(s, [=](std::string &) {
    Scores r;
    computeScores(kind, z, seed, first, tau, f32(x), f32(w), f32(aux), r);
    topK(kind, z, kk, norm, r.scores.data(), i64(indices), f32(weights),
         i64(counts));
    return MOE_RT_OK;
  });
}

moe_rt_status moe_rt_gate_grad(moe_rt_stream s, moe_rt_gate_kind kind,
                               int64_t kk, int normalize, uint64_t seed,
                               double tau, const moe_rt_tensor *x,
                               const moe_rt_tensor *w, const moe_rt_tensor *aux,
                               const moe_rt_tensor *dweights, moe_rt_tensor *dx,
                               moe_rt_tensor *dw, moe_rt_tensor *daux) {
  return moe_rt_gate_grad_at(s, kind, kk, normalize, seed, 0, tau, x, w, aux,
                             dweights, dx, dw, daux);
}

moe_rt_status moe_rt_gate_grad_at(moe_rt_stream s, moe_rt_gate_kind kind,
                                  int64_t kk, int normalize, uint64_t seed,
                                  int64_t first, double tau,
                                  const moe_rt_tensor *x,
                                  const moe_rt_tensor *w,
                                  const moe_rt_tensor *aux,
                                  const moe_rt_tensor *dweights,
                                  moe_rt_tensor *dx, moe_rt_tensor *dw,
                                  moe_rt_tensor *daux) {
  Sizes z{};
  Check c = gateKindChecks("moe_rt_gate_grad", s, kind, kk, tau, x, w, aux, z);
  c.that(first >= 0, "first_sample must not be negative");
  c.tensor(dweights, "dweights", MOE_RT_F32)
      .tensor(dx, "dx", MOE_RT_F32, 1)
      .tensor(dw, "dw", MOE_RT_F32, 2)
      .tensor(daux, "daux", MOE_RT_F32, 2, true);
  if (c.status)
    return c.status;
  if (kind == MOE_RT_GATE_EXPERT_CHOICE) {
    int64_t cap = 0;
    expertChoiceChecks(c, z, normalize, dweights, "dweights", cap)
        .that(daux == nullptr, "expert_choice takes no daux")
        .sizeOf(dx, "dx", x)
        .sizeOf(dw, "dw", w);
    if (c.status)
      return c.status;
    MOE_RT_ON_CUDA(
        s, cuda::gateGrad(s, deviceGate(kind, z, cap, normalize, seed, first, tau),
                          f32(x), f32(w), nullptr, f32(dweights), f32(dx),
                          f32(dw), nullptr));
    return enqueue(s, [=](std::string &) {
      Scores r;
      computeScores(kind, z, seed, first, tau, f32(x), f32(w), f32(aux), r);
      std::vector<float> wts(z.e * cap), dlogits(z.t * z.e, 0.0f);
      std::vector<int64_t> idx(z.e * cap), counts(z.e);
      k::expertChoiceTopC(z.t, z.e, cap, r.scores.data(), idx.data(),
                          wts.data(), counts.data());
      k::expertChoiceBackward(z.t, z.e, cap, r.scores.data(), idx.data(),
                              f32(dweights), dlogits.data());
      zero(dx);
      zero(dw);
      k::linearBackward(z.t, z.m, z.e, f32(x), f32(w), dlogits.data(), f32(dx),
                        f32(dw), (float *)nullptr);
      return MOE_RT_OK;
    });
  }
  c.that((aux != nullptr) == (daux != nullptr),
         "daux must be given exactly when aux is")
      .size(dweights, "dweights", z.t * kk)
      .sizeOf(dx, "dx", x)
      .sizeOf(dw, "dw", w)
      .sizeOf(daux, "daux", aux);
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(
      s, cuda::gateGrad(s, deviceGate(kind, z, kk, normalize, seed, first, tau),
                        f32(x), f32(w), f32(aux), f32(dweights), f32(dx),
                        f32(dw), f32(daux)));
  bool norm = normalize != 0;
  return enqueue(s, [=](std::string &) {
    Scores r;
    computeScores(kind, z, seed, first, tau, f32(x), f32(w), f32(aux), r);
    std::vector<float> wts(z.t * kk), dscores(z.t * z.e, 0.0f);
    std::vector<int64_t> idx(z.t * kk), counts(z.e);
    topK(kind, z, kk, norm, r.scores.data(), idx.data(), wts.data(),
         counts.data());
    if (kind == MOE_RT_GATE_SIGMOID)
      k::sigmoidTopKBackward(z.t, z.e, kk, norm, r.scores.data(), idx.data(),
                             f32(dweights), dscores.data());
    else
      k::softmaxTopKBackward(z.t, z.e, kk, norm, r.scores.data(), idx.data(),
                             f32(dweights), dscores.data());
    zero(dx);
    zero(dw);
    zero(daux);
    switch (kind) {
    case MOE_RT_GATE_NOISY_TOPK: {
      std::vector<float> dclean(z.t * z.e), dnoisy(z.t * z.e);
      k::noisyScoresBackward(z.t * z.e, r.noisy.data(), r.noise, dscores.data(),
                             dclean.data(), dnoisy.data());
      k::linearBackward(z.t, z.m, z.e, f32(x), f32(w), dclean.data(), f32(dx),
                        f32(dw), (float *)nullptr);
      k::linearBackward(z.t, z.m, z.e, f32(x), f32(aux), dnoisy.data(), f32(dx),
                        f32(daux), (float *)nullptr);
      break;
    }
    case MOE_RT_GATE_COSINE: {
      std::vector<float> dproj(z.t * z.d);
      k::cosineScoresBackward(z.t, z.d, z.e, tau, r.proj.data(), f32(w),
                              dscores.data(), dproj.data(), f32(dw));
      k::linearBackward(z.t, z.m, z.d, f32(x), f32(aux), dproj.data(), f32(dx),
                        f32(daux), (float *)nullptr);
      break;
    }
    default:
      k::linearBackward(z.t, z.m, z.e, f32(x), f32(w), dscores.data(), f32(dx),
                        f32(dw), (float *)nullptr);
    }
    return MOE_RT_OK;
  });
}
