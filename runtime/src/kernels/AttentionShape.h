//===- AttentionShape.h - moe.attention's shape and biases ------*- C++ -*-===//
//
// The plain data describing one moe.attention (kernels/Attention.h has the
// CPU kernel): shared with the CUDA backend, which includes only this (the
// CPU kernel uses Eigen, which nvcc-compiled files do not need).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_ATTENTIONSHAPE_H
#define MOE_RT_KERNELS_ATTENTIONSHAPE_H

#include <cstdint>

namespace moe_rt::kernels {

struct AttentionShape {
  int64_t batch, seq, embed, heads, kvHeads, headDim;
  bool causal = false, rotary = false;
  /// 0: no pre-norm, 1: LayerNorm, 2: RMSNorm.
  int norm = 0;
  double eps = 1e-5;
  /// Rotary base and lane pairing (moe.attention's theta and layout).
  double theta = 10000.0;
  bool interleaved = false;
  /// Clamp of Q, K, V to [-clip, clip] (moe.attention's clip_qkv); 0: none.
  double clip = 0.0;
};

/// The optional biases of the Q, K, V and output projections (null: none).
template <typename T> struct AttentionBias {
  const T *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
};
/// Their gradients (null: not wanted).
template <typename T> struct AttentionBiasGrad {
  T *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
};

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_ATTENTIONSHAPE_H
