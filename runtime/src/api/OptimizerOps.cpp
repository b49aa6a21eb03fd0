//===- OptimizerOps.cpp - optimizer updates and norms: checks, backend ----===//
//
// moe_rt_adamw, moe_rt_sgd_momentum, moe_rt_sum_squares, moe_rt_clip_coef:
// each checks its tensors, builds the per-element body of
// src/device/OptimizerOps.h and hands it to its stream's backend.
//
//===----------------------------------------------------------------------===//

#include "OpChecks.h"

#include "../cpu/CpuOptimizerOps.h"

#if MOE_RT_HAVE_CUDA
#include "../cuda/CudaOptimizerOps.h"
#endif

#include <string>

using namespace moe_rt;
using device::optim::AdamWBody;
using device::optim::SgdMomentumBody;

namespace {

/// The optimizer's scalar operands: lr (F32), step (I64, if wanted) and
/// the optional clip scale (F32), one element each, on the stream's
/// backend.
bool scalarsOk(moe_rt_stream s, const moe_rt_tensor *lr,
               const moe_rt_tensor *step, bool wantStep,
               const moe_rt_tensor *scale) {
  moe_rt_backend b = backendOf(s);
  return isOn(lr, MOE_RT_F32, b, 1) &&
         (!wantStep || isOn(step, MOE_RT_I64, b, 1)) &&
         (!scale || isOn(scale, MOE_RT_F32, b, 1));
}

const float *optionalF32(const moe_rt_tensor *t) { return t ? f32(t) : nullptr; }

} // namespace

moe_rt_status moe_rt_adamw(moe_rt_stream s, double beta1, double beta2,
                           double eps, double weight_decay,
                           const moe_rt_tensor *lr, const moe_rt_tensor *step,
                           const moe_rt_tensor *scale,
                           const moe_rt_tensor *param,
                           const moe_rt_tensor *grad,
                           const moe_rt_tensor *exp_avg,
                           const moe_rt_tensor *exp_avg_sq,
                           moe_rt_tensor *new_param, moe_rt_tensor *new_exp_avg,
                           moe_rt_tensor *new_exp_avg_sq) {
  int64_t n = param ? moe_rt_tensor_numel(param) : -1;
  moe_rt_backend b = backendOf(s);
  if (!s || !scalarsOk(s, lr, step, true, scale))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_adamw: lr (F32), step (I64) and scale (F32, or "
                "NULL) must be one-element tensors on the stream's backend");
  for (const moe_rt_tensor *t : {param, grad, exp_avg, exp_avg_sq,
                                 (const moe_rt_tensor *)new_param,
                                 (const moe_rt_tensor *)new_exp_avg,
                                 (const moe_rt_tensor *)new_exp_avg_sq})
    if (!isOn(t, MOE_RT_F32, b, n))
      return fail(MOE_RT_INVALID_ARGUMENT,
                  "moe_rt_adamw: param, grad, state and results must be F32 "
                  "tensors of one size on the stream's backend");
  if (!(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1 && eps > 0 &&
        weight_decay >= 0))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_adamw: needs 0 <= beta1, beta2 < 1, eps > 0 and "
                "weight_decay >= 0");
  AdamWBody body{f32(param),     f32(grad),         f32(exp_avg),
                 f32(exp_avg_sq), f32(lr),          optionalF32(scale),
                 static_cast<const int64_t *>(step->data),
                 beta1,           beta2,             eps,
                 weight_decay,    f32(new_param),    f32(new_exp_avg),
                 f32(new_exp_avg_sq)};
  MOE_RT_ON_CUDA(s, cuda::adamw(s, n, body));
  return cpu::adamw(s, n, body);
}

moe_rt_status moe_rt_sgd_momentum(moe_rt_stream s, double momentum,
                                  double weight_decay, const moe_rt_tensor *lr,
                                  const moe_rt_tensor *scale,
                                  const moe_rt_tensor *param,
                                  const moe_rt_tensor *grad,
                                  const moe_rt_tensor *buffer,
                                  moe_rt_tensor *new_param,
                                  moe_rt_tensor *new_buffer) {
  int64_t n = param ? moe_rt_tensor_numel(param) : -1;
  moe_rt_backend b = backendOf(s);
  if (!s || !scalarsOk(s, lr, nullptr, false, scale))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_sgd_momentum: lr (F32) and scale (F32, or NULL) must "
                "be one-element tensors on the stream's backend");
  for (const moe_rt_tensor *t :
       {param, grad, buffer, (const moe_rt_tensor *)new_param,
        (const moe_rt_tensor *)new_buffer})
    if (!isOn(t, MOE_RT_F32, b, n))
      return fail(MOE_RT_INVALID_ARGUMENT,
                  "moe_rt_sgd_momentum: param, grad, buffer and results must "
                  "be F32 tensors of one size on the stream's backend");
  if (!(momentum >= 0 && weight_decay >= 0))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_sgd_momentum: needs momentum >= 0 and weight_decay "
                ">= 0");
  SgdMomentumBody body{f32(param),      f32(grad),      f32(buffer),
                       f32(lr),         optionalF32(scale), momentum,
                       weight_decay,    f32(new_param), f32(new_buffer)};
  MOE_RT_ON_CUDA(s, cuda::sgdMomentum(s, n, body));
  return cpu::sgdMomentum(s, n, body);
}

moe_rt_status moe_rt_sum_squares(moe_rt_stream s, const moe_rt_tensor *x,
                                 int accumulate, moe_rt_tensor *out) {
  moe_rt_backend b = backendOf(s);
  if (!s || !x || !isOn(x, MOE_RT_F32, b, moe_rt_tensor_numel(x)) ||
      !isOn(out, MOE_RT_F32, b, 1))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_sum_squares: needs an F32 tensor and a one-element "
                "F32 result on the stream's backend");
  int64_t n = moe_rt_tensor_numel(x);
  MOE_RT_ON_CUDA(s, cuda::sumSquares(s, n, f32(x), accumulate != 0, f32(out)));
  return cpu::sumSquares(s, n, f32(x), accumulate != 0, f32(out));
}

moe_rt_status moe_rt_clip_coef(moe_rt_stream s, const moe_rt_tensor *sum_sq,
                               double max_norm, moe_rt_tensor *out) {
  moe_rt_backend b = backendOf(s);
  if (!s || !isOn(sum_sq, MOE_RT_F32, b, 1) || !isOn(out, MOE_RT_F32, b, 1))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_clip_coef: needs one-element F32 tensors on the "
                "stream's backend");
  if (!(max_norm > 0))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_clip_coef: max_norm must be positive, got " +
                    std::to_string(max_norm));
  MOE_RT_ON_CUDA(s, cuda::clipCoef(s, f32(sum_sq), max_norm, f32(out)));
  return cpu::clipCoef(s, f32(sum_sq), max_norm, f32(out));
}
