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

/// out[i] = act(v[i]) (slope false) or act'(v[i]) (slope true), i < n.
template <typename T>
void activateArray(Activation act, bool slope, int64_t n, const T *v, T *out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = T(slope ? activateGrad(act, v[i]) : activate(act, v[i]));
}

/// The float arrays: the same formulas on Eigen packets.
template <>
inline void activateArray<float>(Activation act, bool slope, int64_t n,
                                 const float *v, float *out) {
  using Array = Eigen::Array<float, Eigen::Dynamic, 1>;
  Eigen::Map<const Array> x(v, n);
  Eigen::Map<Array> y(out, n);
  switch (act) {
  case Activation::Relu:
    if (slope)
      y = (x > 0.0f).cast<float>();
    else
      y = x.max(0.0f);
    return;
  case Activation::Gelu: {
    // cdf = (1 + erf(x / sqrt 2)) / 2, pdf = exp(-x^2 / 2) / sqrt(2 pi).
    const float invSqrt2 = float(M_SQRT1_2);
    const float invSqrt2Pi = float(0.5 * M_2_SQRTPI * M_SQRT1_2);
    if (!slope) {
      y = 0.5f * x * (1.0f + (x * invSqrt2).erf());
      return;
    }
    y = 0.5f * (1.0f + (x * invSqrt2).erf()) +
        x * (-0.5f * x.square()).exp() * invSqrt2Pi;
    return;
  }
  case Activation::Silu: {
    // s = sigmoid(x); silu = x s, silu' = s (1 + x (1 - s)).
    y = 1.0f / (1.0f + (-x).exp());
    if (!slope)
      y = x * y;
    else
      y = y * (1.0f + x * (1.0f - y));
    return;
  }
  }
}

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_ACTIVATIONS_H
