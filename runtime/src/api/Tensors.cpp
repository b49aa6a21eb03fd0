//===- Tensor.cpp - C API for tensors -------------------------------------===//

#include "../Backend.h"
#include "../Error.h"

#include <cstdlib>
#include <cstring>
#include <limits>

using namespace moe_rt;

extern "C" size_t moe_rt_dtype_size(moe_rt_dtype dtype) {
  switch (dtype) {
  case MOE_RT_F32:
  case MOE_RT_I32:
    return 4;
  case MOE_RT_F16:
  case MOE_RT_BF16:
    return 2;
  case MOE_RT_I64:
    return 8;
  }
  return 0;
}

extern "C" int64_t moe_rt_tensor_numel(const moe_rt_tensor *tensor) {
  if (!tensor || tensor->rank < 0 || tensor->rank > MOE_RT_MAX_RANK)
    return -1;
  int64_t n = 1;
  for (int32_t i = 0; i < tensor->rank; ++i)
    n *= tensor->shape[i];
  return n;
}

extern "C" moe_rt_status moe_rt_tensor_create(moe_rt_backend backend,
                                              moe_rt_dtype dtype, int32_t rank,
                                              const int64_t *shape,
                                              moe_rt_tensor *out) {
  if (!out)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_tensor_create: out is NULL");
  std::memset(out, 0, sizeof(*out));
  if (rank < 0 || rank > MOE_RT_MAX_RANK)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_tensor_create: rank " + std::to_string(rank) +
                    " is outside [0, " + std::to_string(MOE_RT_MAX_RANK) + "]");
  if (rank > 0 && !shape)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_tensor_create: NULL shape");
  size_t elemSize = moe_rt_dtype_size(dtype);
  if (!elemSize)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_tensor_create: bad dtype");
  size_t bytes = elemSize;
  for (int32_t i = 0; i < rank; ++i) {
    if (shape[i] < 0)
      return fail(MOE_RT_INVALID_ARGUMENT,
                  "moe_rt_tensor_create: dimension " + std::to_string(i) +
                      " is negative (" + std::to_string(shape[i]) + ")");
    if (shape[i] && bytes > std::numeric_limits<size_t>::max() /
                                static_cast<size_t>(shape[i]))
      return fail(MOE_RT_INVALID_ARGUMENT,
                  "moe_rt_tensor_create: size overflows");
    bytes *= static_cast<size_t>(shape[i]);
  }
  void *data = nullptr;
  if (backend == MOE_RT_CPU) {
    data = std::calloc(bytes ? bytes : 1, 1);
    if (!data)
      return fail(MOE_RT_OUT_OF_MEMORY,
                  "moe_rt_tensor_create: cannot allocate " +
                      std::to_string(bytes) + " bytes");
  } else if (backend == MOE_RT_CUDA) {
    if (moe_rt_status s = cudaAllocZeroed(bytes ? bytes : 1, &data))
      return s;
  } else {
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_tensor_create: unknown backend");
  }
  out->data = data;
  out->rank = rank;
  for (int32_t i = 0; i < rank; ++i)
    out->shape[i] = shape[i];
  out->dtype = dtype;
  out->backend = backend;
  return ok();
}

extern "C" moe_rt_status moe_rt_tensor_destroy(moe_rt_tensor *tensor) {
  if (!tensor)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_tensor_destroy: NULL tensor");
  if (tensor->backend == MOE_RT_CUDA) {
    if (moe_rt_status s = cudaFree(tensor->data))
      return s;
  } else {
    std::free(tensor->data);
  }
  tensor->data = nullptr;
  return ok();
}

extern "C" moe_rt_status moe_rt_tensor_copy(moe_rt_tensor *dst,
                                            const moe_rt_tensor *src) {
  if (!dst || !src)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_tensor_copy: NULL tensor");
  for (const moe_rt_tensor *t : {static_cast<const moe_rt_tensor *>(dst), src})
    if (t->backend != MOE_RT_CPU && t->backend != MOE_RT_CUDA)
      return fail(MOE_RT_INVALID_ARGUMENT,
                  "moe_rt_tensor_copy: unknown backend " +
                      std::to_string(static_cast<int>(t->backend)));
  if (dst->dtype != src->dtype || !moe_rt_dtype_size(src->dtype))
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_tensor_copy: dtypes differ or are invalid (dst " +
                    std::to_string(static_cast<int>(dst->dtype)) + ", src " +
                    std::to_string(static_cast<int>(src->dtype)) + ")");
  int64_t n = moe_rt_tensor_numel(src);
  if (n < 0 || moe_rt_tensor_numel(dst) != n)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_tensor_copy: dst has " +
                    std::to_string(moe_rt_tensor_numel(dst)) +
                    " elements, src " + std::to_string(n));
  if (n == 0)
    return ok();
  if (!dst->data || !src->data)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_tensor_copy: NULL data");
  size_t bytes = static_cast<size_t>(n) * moe_rt_dtype_size(src->dtype);
  if (dst->backend == MOE_RT_CPU && src->backend == MOE_RT_CPU) {
    std::memmove(dst->data, src->data, bytes);
    return ok();
  }
  return cudaCopyBytes(dst->data, dst->backend, src->data, src->backend,
                       bytes);
}
