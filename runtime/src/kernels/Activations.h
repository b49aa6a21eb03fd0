//===- Activations.h - activation values and slopes over arrays -*- C++ -*-===//
//
// The expert FFN's activations (Expert.h) over a whole hidden layer at once.
// In float they use Eigen's vectorised exp and erf (Eigen 3.4, SSE/AVX
// packets): a step spent ~10% in scalar libm exp before. Accuracy against
// double libm (measured over dense grids, tests/KernelGradTest.cpp checks
// the activations): Eigen's float exp <= 1.2e-7 relative (~1 ulp), its
// erf <= 4.3e-7 absolute, inside the fp32 tolerances of the PyTorch tests.
// Other element types (double: the finite-difference tests) take the
// scalar double formulas of Expert.h.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_ACTIVATIONS_H
#define MOE_RT_KERNELS_ACTIVATIONS_H

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include <cmath>
#include <cstdint>

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

/// value[i] = act(v[i]) and slope[i] = act'(v[i]) for i < n; either output
/// may be null. The backward needs both: one pass computes their shared
/// part (the sigmoid, the normal cdf) once.
template <typename T>
void activateArray(Activation act, int64_t n, const T *v, T *value, T *slope) {
  for (int64_t i = 0; i < n; ++i) {
    if (value)
      value[i] = T(activate(act, v[i]));
    if (slope)
      slope[i] = T(activateGrad(act, v[i]));
  }
}

/// The float arrays: the same formulas on Eigen packets.
template <>
inline void activateArray<float>(Activation act, int64_t n, const float *v,
                                 float *value, float *slope) {
  using Array = Eigen::Array<float, Eigen::Dynamic, 1>;
  Eigen::Map<const Array> x(v, n);
  switch (act) {
  case Activation::Relu:
    if (value)
      Eigen::Map<Array>(value, n) = x.max(0.0f);
    if (slope)
      Eigen::Map<Array>(slope, n) = (x > 0.0f).cast<float>();
    return;
  case Activation::Gelu: {
    // cdf = (1 + erf(x / sqrt 2)) / 2, pdf = exp(-x^2 / 2) / sqrt(2 pi);
    // gelu = x cdf, gelu' = cdf + x pdf.
    const float invSqrt2 = float(M_SQRT1_2);
    const float invSqrt2Pi = float(0.5 * M_2_SQRTPI * M_SQRT1_2);
    Array cdf = 0.5f * (1.0f + (x * invSqrt2).erf());
    if (value)
      Eigen::Map<Array>(value, n) = x * cdf;
    if (slope)
      Eigen::Map<Array>(slope, n) =
          cdf + x * (-0.5f * x.square()).exp() * invSqrt2Pi;
    return;
  }
  case Activation::Silu: {
    // s = sigmoid(x); silu = x s, silu' = s (1 + x (1 - s)).
    Array s = 1.0f / (1.0f + (-x).exp());
    if (value)
      Eigen::Map<Array>(value, n) = x * s;
    if (slope)
      Eigen::Map<Array>(slope, n) = s * (1.0f + x * (1.0f - s));
    return;
  }
  }
}

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_ACTIVATIONS_H
