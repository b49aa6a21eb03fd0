//===- GateOps.cpp - the gate calls: checks, then the stream's backend ----===//
//
// moe_rt_gate / moe_rt_gate_at and their vjps for every gate kind, and
// moe_rt_gate_topk (softmax_topk) with its vjp: each checks its arguments,
// describes the call as a GateShape and hands it to the stream's backend
// (src/cpu/CpuGateOps.cpp, or src/cuda's gate).
//
//===----------------------------------------------------------------------===//

#include "moe_rt/ops.h"

#include "OpChecks.h"

#include "../cpu/CpuOps.h"
#include "kernels/Gates.h"

#if MOE_RT_HAVE_CUDA
#include "../cuda/CudaRoutingOps.h"
#endif

#include <string>

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

/// What the backends are told of a checked call; `k` is the capacity C
/// for expert_choice.
GateShape gateShape(moe_rt_gate_kind kind, const Sizes &z, int64_t k,
                    int normalize, uint64_t seed = 0, int64_t first = 0,
                    double tau = 1) {
  GateShape g;
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

/// What moe_rt_gate_topk and its vjp both check: the stream, x, w whose
/// rows are x's last dimension, and k in [1, E]; `g` gets the sizes of
/// x (... x M) routed by w (M x E) over T tokens.
Check gateChecks(const char *call, moe_rt_stream s, int64_t kk,
                 const moe_rt_tensor *x, const moe_rt_tensor *w, Sizes &g) {
  Check c{call, backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .tensor(x, "x", MOE_RT_F32, 1)
      .tensor(w, "w", MOE_RT_F32, 2);
  if (c.status)
    return c;
  c.that(dim(w, 0) == dim(x, -1), "w's rows must match x's last dimension");
  if (c.status)
    return c;
  int64_t m = dim(w, 0);
  g = {moe_rt_tensor_numel(x) / m, m, dim(w, 1), m, 1};
  return c.that(kk >= 1 && kk <= g.e, "k must be in [1, experts]");
}

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
  int64_t choices = kk;
  if (kind == MOE_RT_GATE_EXPERT_CHOICE)
    expertChoiceChecks(c, z, normalize, indices, "indices", choices)
        .size(weights, "weights", z.e * choices)
        .size(counts, "counts", z.e);
  else
    c.size(indices, "indices", z.t * kk)
        .size(weights, "weights", z.t * kk)
        .size(counts, "counts", z.e);
  if (c.status)
    return c.status;
  GateShape g = gateShape(kind, z, choices, normalize, seed, first, tau);
  MOE_RT_ON_CUDA(s, cuda::gate(s, g, f32(x), f32(w), f32(aux), i64(indices),
                               f32(weights), i64(counts)));
  return cpu::gate(s, g, x, w, aux, indices, weights, counts);
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
  int64_t choices = kk;
  if (kind == MOE_RT_GATE_EXPERT_CHOICE)
    expertChoiceChecks(c, z, normalize, dweights, "dweights", choices)
        .that(daux == nullptr, "expert_choice takes no daux")
        .sizeOf(dx, "dx", x)
        .sizeOf(dw, "dw", w);
  else
    c.that((aux != nullptr) == (daux != nullptr),
           "daux must be given exactly when aux is")
        .size(dweights, "dweights", z.t * kk)
        .sizeOf(dx, "dx", x)
        .sizeOf(dw, "dw", w)
        .sizeOf(daux, "daux", aux);
  if (c.status)
    return c.status;
  GateShape g = gateShape(kind, z, choices, normalize, seed, first, tau);
  MOE_RT_ON_CUDA(s, cuda::gateGrad(s, g, f32(x), f32(w), f32(aux),
                                   f32(dweights), f32(dx), f32(dw),
                                   f32(daux)));
  return cpu::gateGrad(s, g, x, w, aux, dweights, dx, dw, daux);
}

moe_rt_status moe_rt_gate_topk(moe_rt_stream s, int64_t kk, int normalize,
                               const moe_rt_tensor *x, const moe_rt_tensor *w,
                               moe_rt_tensor *indices, moe_rt_tensor *weights,
                               moe_rt_tensor *counts) {
  Sizes g{};
  Check c = gateChecks("moe_rt_gate_topk", s, kk, x, w, g);
  c.tensor(indices, "indices", MOE_RT_I64)
      .tensor(weights, "weights", MOE_RT_F32)
      .tensor(counts, "counts", MOE_RT_I64);
  int64_t e = g.e, t = g.t;
  c.that(moe_rt_tensor_numel(indices) == t * kk &&
             moe_rt_tensor_numel(weights) == t * kk &&
             moe_rt_tensor_numel(counts) == e,
         "indices and weights need tokens x k entries, counts E");
  if (c.status)
    return c.status;
  GateShape z = gateShape(MOE_RT_GATE_SOFTMAX_TOPK, g, kk, normalize);
  MOE_RT_ON_CUDA(s, cuda::gate(s, z, f32(x), f32(w), nullptr, i64(indices),
                               f32(weights), i64(counts)));
  return cpu::gate(s, z, x, w, nullptr, indices, weights, counts);
}

moe_rt_status moe_rt_gate_topk_grad(moe_rt_stream s, int64_t kk, int normalize,
                                    const moe_rt_tensor *x,
                                    const moe_rt_tensor *w,
                                    const moe_rt_tensor *dweights,
                                    moe_rt_tensor *dx, moe_rt_tensor *dw) {
  Sizes g{};
  Check c = gateChecks("moe_rt_gate_topk_grad", s, kk, x, w, g);
  c.tensor(dweights, "dweights", MOE_RT_F32)
      .tensor(dx, "dx", MOE_RT_F32, 1)
      .tensor(dw, "dw", MOE_RT_F32, 2);
  int64_t t = g.t;
  c.size(dweights, "dweights", t * kk).sizeOf(dx, "dx", x).sizeOf(dw, "dw", w);
  if (c.status)
    return c.status;
  GateShape z = gateShape(MOE_RT_GATE_SOFTMAX_TOPK, g, kk, normalize);
  MOE_RT_ON_CUDA(s, cuda::gateGrad(s, z, f32(x), f32(w), nullptr,
                                   f32(dweights), f32(dx), f32(dw), nullptr));
  return cpu::gateGrad(s, z, x, w, nullptr, dweights, dx, dw, nullptr);
}
