//===- OptimizerOps.h - optimizer updates and gradient norms ----*- C++ -*-===//
//
// moe_rt_adamw, moe_rt_sgd_momentum, moe_rt_sum_squares and
// moe_rt_clip_coef, written once: the per-element bodies below are what
// both backends run — the CPU backend loops over them in a host task
// (src/cpu/CpuOptimizerOps.cpp), the CUDA backend launches them through an
// executor (src/cuda/CudaOptimizerOps.cu); runtime/tests/OptimizerTest.cpp
// checks them on the host executor against a float64 transcription of
// torch.optim.
//
// Scalars that change from step to step (the learning rate, the step
// count, the clip coefficient) are read from tensors when the body runs,
// so a queued update sees the value its stream computed before it (the
// clip coefficient comes from a collective that may still be running when
// the update is queued).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_DEVICE_OPTIMIZEROPS_H
#define MOE_RT_SRC_DEVICE_OPTIMIZEROPS_H

#include "Device.h"

#include "moe_rt/moe_rt.h"

#include <cmath>
#include <cstdint>

namespace moe_rt::device {

namespace optim {

/// The gradient clipping scale: *scale, or 1 when absent.
MOE_HD inline double gradScale(const float *scale) {
  return scale ? double(*scale) : 1.0;
}

/// torch.optim.AdamW (PyTorch 1.13 _single_tensor_adamw), in double per
/// element: decay first, then the moments, then the bias-corrected step.
struct AdamWBody {
  const float *param, *grad, *expAvg, *expAvgSq;
  const float *lr, *scale;
  const int64_t *step;
  double beta1, beta2, eps, weightDecay;
  float *newParam, *newExpAvg, *newExpAvgSq;
  MOE_HD void operator()(int64_t i) const {
    double eta = *lr, t = double(*step);
    double g = grad[i] * gradScale(scale);
    double p = param[i] * (1.0 - eta * weightDecay);
    double m = beta1 * expAvg[i] + (1.0 - beta1) * g;
    double v = beta2 * expAvgSq[i] + (1.0 - beta2) * g * g;
    double c1 = 1.0 - ::pow(beta1, t), c2 = 1.0 - ::pow(beta2, t);
    double denom = ::sqrt(v) / ::sqrt(c2) + eps;
    newParam[i] = float(p - eta / c1 * m / denom);
    newExpAvg[i] = float(m);
    newExpAvgSq[i] = float(v);
  }
};

/// torch.optim.SGD, dampening 0, no Nesterov: the buffer starts at 0,
/// which makes torch's first-step `buf = d` the general rule.
struct SgdMomentumBody {
  const float *param, *grad, *buffer;
  const float *lr, *scale;
  double momentum, weightDecay;
  float *newParam, *newBuffer;
  MOE_HD void operator()(int64_t i) const {
    double d = grad[i] * gradScale(scale) + weightDecay * param[i];
    double b = momentum * buffer[i] + d;
    newParam[i] = float(param[i] - double(*lr) * b);
    newBuffer[i] = float(b);
  }
};

/// Elements summed by one thread of sum_squares' first launch.
constexpr int64_t kSquaresChunk = 4096;

inline int64_t squaresChunks(int64_t n) {
  return (n + kSquaresChunk - 1) / kSquaresChunk;
}

/// partial[c] = sum of x[i]^2 over chunk c, in double.
struct PartialSquaresBody {
  const float *x;
  int64_t n;
  double *partial;
  MOE_HD void operator()(int64_t c) const {
    double acc = 0;
    int64_t end = (c + 1) * kSquaresChunk < n ? (c + 1) * kSquaresChunk : n;
    for (int64_t i = c * kSquaresChunk; i < end; ++i)
      acc += double(x[i]) * x[i];
    partial[c] = acc;
  }
};

/// *out = (accumulate ? *out : 0) + sum of the partials, in chunk order.
struct FinishSquaresBody {
  const double *partial;
  int64_t chunks;
  bool accumulate;
  float *out;
  MOE_HD void operator()(int64_t) const {
    double acc = accumulate ? double(*out) : 0.0;
    for (int64_t c = 0; c < chunks; ++c)
      acc += partial[c];
    *out = float(acc);
  }
};

/// clip_grad_norm_'s coefficient, clamped to 1:
/// min(1, max_norm / (sqrt(sum_sq) + 1e-6)).
struct ClipCoefBody {
  const float *sumSq;
  double maxNorm;
  float *out;
  MOE_HD void operator()(int64_t) const {
    double coef = maxNorm / (::sqrt(double(*sumSq)) + 1e-6);
    *out = float(coef < 1.0 ? coef : 1.0);
  }
};

} // namespace optim

template <class X>
moe_rt_status adamw(X &x, int64_t n, const optim::AdamWBody &body) {
  return x.forEach(n, body);
}

template <class X>
moe_rt_status sgdMomentum(X &x, int64_t n,
                          const optim::SgdMomentumBody &body) {
  return x.forEach(n, body);
}

/// *out (+)= sum of x^2: per-chunk partials in double (scratch of
/// `chunks` doubles, as floats pairs), then one thread sums them in order,
/// so the result does not depend on how the first launch is scheduled.
template <class X>
moe_rt_status sumSquares(X &x, int64_t n, const float *in, bool accumulate,
                         float *out) {
  int64_t chunks = optim::squaresChunks(n);
  double *partial = nullptr;
  if (chunks > 0) {
    partial = reinterpret_cast<double *>(x.scratchF32(2 * chunks));
    if (!partial)
      return x.status();
    if (moe_rt_status st =
            x.forEach(chunks, optim::PartialSquaresBody{in, n, partial}))
      return st;
  }
  return x.forEach(1, optim::FinishSquaresBody{partial, chunks, accumulate,
                                               out});
}

template <class X>
moe_rt_status clipCoef(X &x, const float *sumSq, double maxNorm, float *out) {
  return x.forEach(1, optim::ClipCoefBody{sumSq, maxNorm, out});
}

} // namespace moe_rt::device

#endif // MOE_RT_SRC_DEVICE_OPTIMIZEROPS_H
