//===- Expert.h - grouped expert FFN: forward and backward ------*- C++ -*-===//
//
// moe.expert / moe.shared_expert on the CPU: for each local expert e of an
// E_l x S x M input, h = x up[e]; a = act(h) (or act(x gate[e]) * h when
// gated, SwiGLU-style); y = a down[e]. GELU is the exact (erf) form PyTorch
// uses by default. The backward recomputes h and the gate projection from x
// (activation recomputation) rather than keeping them from the forward.
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

/// Expert e's hidden layer for its slots x m input xe: h = xe up[e], the
/// gate projection g = xe gate[e] (when gated) and the activation a. The
/// forward and (recomputing it) the backward share it; the backward also
/// asks for act(g) (`gateAct`, gated) and the slope act'(g) or act'(h)
/// (`slope`), computed in the same pass.
template <typename T>
void expertHidden(Activation act, int64_t e, int64_t slots, int64_t m,
                  int64_t h, const T *xe, const T *up, const T *gate,
                  std::vector<T> &hidden, std::vector<T> &gated,
                  std::vector<T> &a, T *gateAct = nullptr, T *slope = nullptr) {
  gemm(false, false, slots, h, m, T(1), xe, up + e * m * h, T(0),
       hidden.data());
  if (gate)
    gemm(false, false, slots, h, m, T(1), xe, gate + e * m * h, T(0),
         gated.data());
  int64_t n = slots * h;
  if (!gate) {
    activateArray(act, n, hidden.data(), a.data(), slope);
    return;
  }
  T *actOfGate = gateAct ? gateAct : a.data();
  activateArray(act, n, gated.data(), actOfGate, slope);
  for (int64_t i = 0; i < n; ++i)
    a[i] = actOfGate[i] * hidden[i];
}

/// x: experts x slots x m; up, gate: experts x m x h; down: experts x h x m.
/// `gate` may be null (ungated FFN).
template <typename T>
void expertForward(Activation act, int64_t experts, int64_t slots, int64_t m,
                   int64_t h, const T *x, const T *up, const T *gate,
                   const T *down, T *y) {
  std::vector<T> hidden(slots * h), gated(gate ? slots * h : 0), a(slots * h);
  for (int64_t e = 0; e < experts; ++e) {
    expertHidden(act, e, slots, m, h, x + e * slots * m, up, gate, hidden,
                 gated, a);
    gemm(false, false, slots, m, h, T(1), a.data(), down + e * h * m, T(0),
         y + e * slots * m);
  }
}

/// Accumulates dx, dup, dgate (when gated), ddown.
template <typename T>
void expertBackward(Activation act, int64_t experts, int64_t slots, int64_t m,
                    int64_t h, const T *x, const T *up, const T *gate,
                    const T *down, const T *dy, T *dx, T *dup, T *dgate,
                    T *ddown) {
  std::vector<T> hidden(slots * h), gated(gate ? slots * h : 0), a(slots * h),
      da(slots * h), dh(slots * h), dg(gate ? slots * h : 0),
      slope(slots * h);
  for (int64_t e = 0; e < experts; ++e) {
    const T *xe = x + e * slots * m, *dye = dy + e * slots * m;
    // dh holds act(g) until it becomes the gradient below.
    expertHidden(act, e, slots, m, h, xe, up, gate, hidden, gated, a,
                 gate ? dh.data() : nullptr, slope.data());
    // y = a down: dA = dy down^T, dDown += a^T dy.
    gemm(false, true, slots, h, m, T(1), dye, down + e * h * m, T(0),
         da.data());
    gemm(true, false, h, m, slots, T(1), a.data(), dye, T(1),
         ddown + e * h * m);
    if (gate) {
      // a = act(g) h: dh = da act(g), dg = da h act'(g).
      for (int64_t i = 0; i < slots * h; ++i) {
        dg[i] = da[i] * hidden[i] * slope[i];
        dh[i] *= da[i];
      }
    } else {
      for (int64_t i = 0; i < slots * h; ++i)
        dh[i] = da[i] * slope[i];
    }
    gemm(true, false, m, h, slots, T(1), xe, dh.data(), T(1), dup + e * m * h);
    gemm(false, true, slots, m, h, T(1), dh.data(), up + e * m * h, T(1),
         dx + e * slots * m);
    if (gate) {
      gemm(true, false, m, h, slots, T(1), xe, dg.data(), T(1),
           dgate + e * m * h);
      gemm(false, true, slots, m, h, T(1), dg.data(), gate + e * m * h, T(1),
           dx + e * slots * m);
    }
  }
}

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_EXPERT_H
