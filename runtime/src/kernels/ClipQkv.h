//===- ClipQkv.h - moe.attention's clamp of Q, K, V (clip_qkv) --*- C++ -*-===//
//
// DBRX's clip_qkv: the Q, K, V projections (biases included) are clamped to
// [-clip, clip] before rotary; 0 means no clamp. The vjp is torch.clamp's:
// the gradient passes where the value lies inside the range, bounds
// included, and is zero outside. One definition for the CPU kernel
// (Attention.h) and the CUDA bodies (device/AttentionOps.h), hence
// host-and-device.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_CLIPQKV_H
#define MOE_RT_KERNELS_CLIPQKV_H

#if defined(__CUDACC__)
#define MOE_RT_CLIP_HD __host__ __device__
#else
#define MOE_RT_CLIP_HD
#endif

namespace moe_rt::kernels {

/// Whether the clamp passes the gradient at a projection value `raw`.
MOE_RT_CLIP_HD inline bool clipPasses(double clip, double raw) {
  return clip <= 0 || (raw >= -clip && raw <= clip);
}

/// The clamp itself (identity without one).
template <typename T> MOE_RT_CLIP_HD inline T clipValue(double clip, T raw) {
  if (clip <= 0)
    return raw;
  return raw < T(-clip) ? T(-clip) : (raw > T(clip) ? T(clip) : raw);
}

} // namespace moe_rt::kernels

#undef MOE_RT_CLIP_HD

#endif // MOE_RT_KERNELS_CLIPQKV_H
