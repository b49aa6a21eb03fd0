//===- Ops.cpp - C API for tensor ops -------------------------------------===//

#include "../Backend.h"
#include "../Error.h"

using namespace moe_rt;

extern "C" moe_rt_status
moe_rt_tensor_scale(moe_rt_stream stream, moe_rt_tensor *tensor, float factor) {
  if (!stream || !tensor || !tensor->data)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_tensor_scale: NULL stream or tensor");
  if (tensor->dtype != MOE_RT_F32)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_tensor_scale: only F32 tensors are supported");
  if (tensor->backend != stream->impl->backend())
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_tensor_scale: tensor and stream belong to different "
                "backends");
  int64_t n = moe_rt_tensor_numel(tensor);
  if (n < 0)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_tensor_scale: bad tensor");
  auto *data = static_cast<float *>(tensor->data);
  if (tensor->backend == MOE_RT_CUDA)
    return cudaScale(stream, data, n, factor);
  return stream->impl->enqueueHost([data, n, factor](std::string &) {
    for (int64_t i = 0; i < n; ++i)
      data[i] *= factor;
    return MOE_RT_OK;
  });
}
