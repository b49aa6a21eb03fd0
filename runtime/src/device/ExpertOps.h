//===- ExpertOps.h - grouped expert FFN over an executor --------*- C++ -*-===//
//
// moe_rt_expert / moe_rt_expert_grad for the CUDA backend, as
// kernels/Expert.h does them on the CPU, written over an executor
// (Device.h) so that CI checks it on the host. For each of `experts` local
// experts of an experts x S x M input: h = x up[e]; a = act(h), or
// act(x gate[e]) * h when gated (SwiGLU); y = a down[e]. Every expert's
// GEMM is one strided-batched X::gemm (batch = experts); 2-D weights
// (shared experts) are the one-expert case. The backward recomputes h and
// the gate projection from x, as the CPU does.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_DEVICE_EXPERTOPS_H
#define MOE_RT_SRC_DEVICE_EXPERTOPS_H

#include "Device.h"

#include "../OpShapes.h"

#include "moe_rt/ops.h"

#include <cmath>
#include <cstdint>

namespace moe_rt::device {

namespace ffn {

// Device-callable copies of kernels::activate / activateGrad (kernels/ is
// host-only and calls std:: math); DeviceRoutingTest checks that they
// agree bit for bit on the host.

MOE_HD inline double activate(moe_rt_activation a, double v) {
  switch (a) {
  case MOE_RT_RELU:
    return v > 0 ? v : 0;
  case MOE_RT_GELU:
    return 0.5 * v * (1 + ::erf(v / ::sqrt(2.0)));
  case MOE_RT_SILU:
    return v / (1 + ::exp(-v));
  }
  return v;
}

MOE_HD inline double activateGrad(moe_rt_activation a, double v) {
  switch (a) {
  case MOE_RT_RELU:
    return v > 0 ? 1 : 0;
  case MOE_RT_GELU: {
    double cdf = 0.5 * (1 + ::erf(v / ::sqrt(2.0)));
    double pdf = ::exp(-0.5 * v * v) / ::sqrt(2 * 3.14159265358979323846);
    return cdf + v * pdf;
  }
  case MOE_RT_SILU: {
    double s = 1 / (1 + ::exp(-v));
    return s * (1 + v * (1 - s));
  }
  }
  return 1;
}

/// a = act(gated) * hidden when gated, else act(hidden).
struct Activate {
  moe_rt_activation act;
  const float *hidden, *gated; // gated may be null
  float *a;
  MOE_HD void operator()(int64_t i) const {
    a[i] = gated ? float(activate(act, gated[i]) * hidden[i])
                 : float(activate(act, hidden[i]));
  }
};

/// dh (and dg when gated) from da, as kernels::expertBackward.
struct ActivateBack {
  moe_rt_activation act;
  const float *hidden, *gated, *da;
  float *dh, *dg;
  MOE_HD void operator()(int64_t i) const {
    if (gated) {
      dh[i] = float(da[i] * activate(act, gated[i]));
      dg[i] = float(da[i] * hidden[i] * activateGrad(act, gated[i]));
    } else {
      dh[i] = float(da[i] * activateGrad(act, hidden[i]));
    }
  }
};

} // namespace ffn

/// C_e = op(A_e) op(B_e) (+ C_e when accumulate) for every expert e, with
/// packed row-major operands of `aStride`/`bStride`/`cStride` elements per
/// expert.
inline GemmDesc expertGemm(const ExpertShape &f, bool transA, bool transB,
                           int64_t m, int64_t n, int64_t k, const float *a,
                           int64_t aStride, const float *b, int64_t bStride,
                           bool accumulate, float *c, int64_t cStride) {
  GemmDesc g = gemmDesc(transA, transB, m, n, k, 1, a, b, accumulate ? 1 : 0,
                        c);
  g.strideA = aStride;
  g.strideB = bStride;
  g.strideC = cStride;
  g.batch = f.experts;
  return g;
}

/// hidden = x up, gated = x gate (when gate), a = the activation:
/// kernels::expertPreActivations and expertActivation for every expert at
/// once (recomputed in the vjp: device streams keep nothing).
template <class X>
moe_rt_status expertHidden(X &ex, moe_rt_activation act, const ExpertShape &f,
                           const float *x, const float *up, const float *gate,
                           float *hidden, float *gated, float *a) {
  int64_t S = f.slots, M = f.m, H = f.h;
  ex.gemm(expertGemm(f, false, false, S, H, M, x, S * M, up, M * H, false,
                     hidden, S * H));
  if (gate)
    ex.gemm(expertGemm(f, false, false, S, H, M, x, S * M, gate, M * H, false,
                       gated, S * H));
  return ex.forEach(f.experts * S * H,
                    ffn::Activate{act, hidden, gate ? gated : nullptr, a});
}

/// y (experts x S x M) overwritten. `gate` may be null.
template <class X>
moe_rt_status expertForward(X &ex, moe_rt_activation act, const ExpertShape &f,
                            const float *x, const float *up, const float *gate,
                            const float *down, float *y) {
  int64_t n = f.experts * f.slots * f.h;
  float *hidden = ex.scratchF32(n), *a = ex.scratchF32(n),
        *gated = gate ? ex.scratchF32(n) : nullptr;
  if (ex.status())
    return ex.status();
  if (expertHidden(ex, act, f, x, up, gate, hidden, gated, a))
    return ex.status();
  // Zeroed and accumulated: H = 0 then gives zeros on any GEMM backend.
  ex.zero(y, sizeof(float) * f.experts * f.slots * f.m);
  return ex.gemm(expertGemm(f, false, false, f.slots, f.m, f.h, a,
                            f.slots * f.h, down, f.h * f.m, true, y,
                            f.slots * f.m));
}

/// dx, dup, dgate (when gated), ddown overwritten.
template <class X>
moe_rt_status expertBackward(X &ex, moe_rt_activation act,
                             const ExpertShape &f, const float *x,
                             const float *up, const float *gate,
                             const float *down, const float *dy, float *dx,
                             float *dup, float *dgate, float *ddown) {
  int64_t S = f.slots, M = f.m, H = f.h, E = f.experts;
  int64_t n = E * S * H;
  float *hidden = ex.scratchF32(n), *a = ex.scratchF32(n),
        *da = ex.scratchF32(n), *dh = ex.scratchF32(n),
        *gated = gate ? ex.scratchF32(n) : nullptr,
        *dg = gate ? ex.scratchF32(n) : nullptr;
  if (ex.status())
    return ex.status();
  ex.zero(dx, sizeof(float) * E * S * M);
  ex.zero(dup, sizeof(float) * E * M * H);
  ex.zero(ddown, sizeof(float) * E * H * M);
  if (gate)
    ex.zero(dgate, sizeof(float) * E * M * H);
  if (expertHidden(ex, act, f, x, up, gate, hidden, gated, a))
    return ex.status();
  // y = a down: da = dy down^T, ddown += a^T dy.
  ex.gemm(expertGemm(f, false, true, S, H, M, dy, S * M, down, H * M, false,
                     da, S * H));
  ex.gemm(expertGemm(f, true, false, H, M, S, a, S * H, dy, S * M, true, ddown,
                     H * M));
  ex.forEach(n, ffn::ActivateBack{act, hidden, gated, da, dh, dg});
  ex.gemm(expertGemm(f, true, false, M, H, S, x, S * M, dh, S * H, true, dup,
                     M * H));
  ex.gemm(expertGemm(f, false, true, S, M, H, dh, S * H, up, M * H, true, dx,
                     S * M));
  if (gate) {
    ex.gemm(expertGemm(f, true, false, M, H, S, x, S * M, dg, S * H, true,
                       dgate, M * H));
    ex.gemm(expertGemm(f, false, true, S, M, H, dg, S * H, gate, M * H, true,
                       dx, S * M));
  }
  return ex.status();
}

} // namespace moe_rt::device

#endif // MOE_RT_SRC_DEVICE_EXPERTOPS_H
