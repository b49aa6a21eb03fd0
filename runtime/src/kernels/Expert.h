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

#include "Gemm.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace moe_rt::kernels {

enum class Activation { Relu, Gelu, Silu };

inline double activate(Activation a, double v) {
  switch (a) {
  case Activation::Relu:
    return v > 0 ? v : 0;
  case Activation::Gelu:
    return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  case Activation::Silu:
    return v / (1 + std::exp(-v));
  }
  return v;
}

inline double activateGrad(Activation a, double v) {
  switch (a) {
  case Activation::Relu:
    return v > 0 ? 1 : 0;
  case Activation::Gelu: {
    double cdf = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
    double pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    return cdf + v * pdf;
  }
  case Activation::Silu: {
    double s = 1 / (1 + std::exp(-v));
    return s * (1 + v * (1 - s));
  }
  }
  return 1;
}

/// Expert e's hidden layer for its slots x m input xe: h = xe up[e], the
/// gate projection g = xe gate[e] (when gated) and the activation a. The
/// forward and (recomputing it) the backward share it.
template <typename T>
void expertHidden(Activation act, int64_t e, int64_t slots, int64_t m,
                  int64_t h, const T *xe, const T *up, const T *gate,
                  std::vector<T> &hidden, std::vector<T> &gated,
                  std::vector<T> &a) {
  gemm(false, false, slots, h, m, T(1), xe, up + e * m * h, T(0),
       hidden.data());
  if (gate)
    gemm(false, false, slots, h, m, T(1), xe, gate + e * m * h, T(0),
         gated.data());
  for (int64_t i = 0; i < slots * h; ++i)
    a[i] = gate ? T(activate(act, gated[i]) * hidden[i])
                : T(activate(act, hidden[i]));
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
      da(slots * h), dh(slots * h), dg(gate ? slots * h : 0);
  for (int64_t e = 0; e < experts; ++e) {
    const T *xe = x + e * slots * m, *dye = dy + e * slots * m;
    expertHidden(act, e, slots, m, h, xe, up, gate, hidden, gated, a);
    // y = a down: dA = dy down^T, dDown += a^T dy.
    gemm(false, true, slots, h, m, T(1), dye, down + e * h * m, T(0),
         da.data());
    gemm(true, false, h, m, slots, T(1), a.data(), dye, T(1),
         ddown + e * h * m);
    for (int64_t i = 0; i < slots * h; ++i) {
      if (gate) {
        dh[i] = T(da[i] * activate(act, gated[i]));
        dg[i] = T(da[i] * hidden[i] * activateGrad(act, gated[i]));
      } else {
        dh[i] = T(da[i] * activateGrad(act, hidden[i]));
      }
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
