//===- TensorAccess.h - typed views of a checked tensor ---------*- C++ -*-===//
//
// Data pointers and dimensions of tensors whose checks passed, as the C
// API (src/api) and the CPU backend (src/cpu) read them.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_TENSORACCESS_H
#define MOE_RT_SRC_TENSORACCESS_H

#include "moe_rt/moe_rt.h"

namespace moe_rt {

/// F32 data, or null for a null (absent optional) tensor.
inline float *f32(const moe_rt_tensor *t) {
  return t ? static_cast<float *>(t->data) : nullptr;
}
/// I64 data, or null for a null tensor.
inline int64_t *i64(const moe_rt_tensor *t) {
  return t ? static_cast<int64_t *>(t->data) : nullptr;
}
/// Dimension i; negative i counts from the last.
inline int64_t dim(const moe_rt_tensor *t, int i) {
  return t->shape[i < 0 ? t->rank + i : i];
}

} // namespace moe_rt

#endif // MOE_RT_SRC_TENSORACCESS_H
