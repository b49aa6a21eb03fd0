//===- Expert.h - grouped expert FFN: forward and backward ------*- C++ -*-===//
//
// moe.expert / moe.shared_expert on the CPU: for each local expert e of an
// E_l x S x M input, h = x up[e]; a = act(h) (or act(x gate[e]) * h when
// gated, SwiGLU-style); y = a down[e]. GELU is the exact (erf) form PyTorch
// uses by default.
//
// The backward needs the forward's pre-activations h and g = x gate[e].
// The forward can keep them (`ExpertSaved`: S x H floats each per expert)
// and the backward then runs 6 GEMMs instead of 8; without them it
// recomputes h and g from x (activation recomputation) with the same GEMM
// calls, so both give the same bits.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_EXPERT_H
#define MOE_RT_KERNELS_EXPERT_H

#include "Activations.h"
#include "Gemm.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace moe_rt::kernels {

/// Where expert pre-activations live: the forward writes them, the
/// backward reads them; each is experts x slots x h (gated: null when the
/// FFN is not gated). Null `hidden`: nothing kept (the forward uses
/// scratch, the backward recomputes).
template <typename T> struct ExpertSaved {
  T *hidden = nullptr;
  T *gated = nullptr;
};

/// Expert e's pre-activations for its slots x m input xe: hidden = xe up[e]
/// and, when gated, gated = xe gate[e].
template <typename T>
void expertPreActivations(int64_t e, int64_t slots, int64_t m, int64_t h,
                          const T *xe, const T *up, const T *gate, T *hidden,
                          T *gated) {
  gemm(false, false, slots, h, m, T(1), xe, up + e * m * h, T(0), hidden);
  if (gate)
    gemm(false, false, slots, h, m, T(1), xe, gate + e * m * h, T(0), gated);
}

/// The activation a of n pre-activations: act(hidden), or act(gated) *
/// hidden when gated. The backward also asks for act(gated) (`gateAct`,
/// gated) and the slope act'(gated) or act'(hidden) (`slope`), computed in
/// the same pass.
template <typename T>
void expertActivation(Activation act, int64_t n, const T *hidden,
                      const T *gated, T *a, T *gateAct = nullptr,
                      T *slope = nullptr) {
  if (!gated) {
    activateArray(act, n, hidden, a, slope);
    return;
  }
  T *actOfGate = gateAct ? gateAct : a;
  activateArray(act, n, gated, actOfGate, slope);
  for (int64_t i = 0; i < n; ++i)
    a[i] = actOfGate[i] * hidden[i];
}

/// x: experts x slots x m; up, gate: experts x m x h; down: experts x h x m.
/// `gate` may be null (ungated FFN). With `keep`, the pre-activations are
/// written there for the backward.
template <typename T>
void expertForward(Activation act, int64_t experts, int64_t slots, int64_t m,
                   int64_t h, const T *x, const T *up, const T *gate,
                   const T *down, T *y, ExpertSaved<T> keep = {}) {
  int64_t n = slots * h;
  std::vector<T> scratch(keep.hidden ? 0 : (gate ? 2 : 1) * n), a(n);
  for (int64_t e = 0; e < experts; ++e) {
    T *hidden = keep.hidden ? keep.hidden + e * n : scratch.data();
    T *gated = !gate           ? nullptr
               : keep.hidden ? keep.gated + e * n
                             : scratch.data() + n;
    expertPreActivations(e, slots, m, h, x + e * slots * m, up, gate, hidden,
                         gated);
    expertActivation(act, n, hidden, gated, a.data());
    gemm(false, false, slots, m, h, T(1), a.data(), down + e * h * m, T(0),
         y + e * slots * m);
  }
}

/// dx, dup, dgate (when gated), ddown: accumulated into (`accumulate`) or
/// overwritten. `saved`: the forward's pre-activations (else recomputed).
template <typename T>
void expertBackward(Activation act, int64_t experts, int64_t slots, int64_t m,
                    int64_t h, const T *x, const T *up, const T *gate,
                    const T *down, const T *dy, T *dx, T *dup, T *dgate,
                    T *ddown, ExpertSaved<const T> saved = {},
                    bool accumulate = true) {
  int64_t n = slots * h;
  std::vector<T> scratch(saved.hidden ? 0 : (gate ? 2 : 1) * n), a(n), da(n),
      dh(n), dg(gate ? n : 0), slope(n);
  const T beta = accumulate ? T(1) : T(0);
  for (int64_t e = 0; e < experts; ++e) {
    const T *xe = x + e * slots * m, *dye = dy + e * slots * m;
    const T *hidden, *gated = nullptr;
    if (saved.hidden) {
      hidden = saved.hidden + e * n;
      gated = gate ? saved.gated + e * n : nullptr;
    } else {
      T *h0 = scratch.data(), *g0 = gate ? scratch.data() + n : nullptr;
      expertPreActivations(e, slots, m, h, xe, up, gate, h0, g0);
      hidden = h0;
      gated = g0;
    }
    // dh holds act(g) until it becomes the gradient below.
    expertActivation(act, n, hidden, gated, a.data(),
                     gate ? dh.data() : nullptr, slope.data());
    // y = a down: dA = dy down^T, dDown += a^T dy.
    gemm(false, true, slots, h, m, T(1), dye, down + e * h * m, T(0),
         da.data());
    gemm(true, false, h, m, slots, T(1), a.data(), dye, beta,
         ddown + e * h * m);
    if (gate) {
      // a = act(g) h: dh = da act(g), dg = da h act'(g).
      for (int64_t i = 0; i < n; ++i) {
        dg[i] = da[i] * hidden[i] * slope[i];
        dh[i] *= da[i];
      }
    } else {
      for (int64_t i = 0; i < n; ++i)
        dh[i] = da[i] * slope[i];
    }
    gemm(true, false, m, h, slots, T(1), xe, dh.data(), beta, dup + e * m * h);
    gemm(false, true, slots, m, h, T(1), dh.data(), up + e * m * h, beta,
         dx + e * slots * m);
    if (gate) {
      gemm(true, false, m, h, slots, T(1), xe, dg.data(), beta,
           dgate + e * m * h);
      gemm(false, true, slots, m, h, T(1), dg.data(), gate + e * m * h, T(1),
           dx + e * slots * m);
    }
  }
}

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_EXPERT_H
