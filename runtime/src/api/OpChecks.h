//===- OpChecks.h - argument checks and stream helpers of the CPU ops -*- C++
//-*-===//
//
// Shared by the op files (StepOps.cpp, GateOps.cpp): every call checks its
// arguments the same way and reports the same messages.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_CPU_OPCHECKS_H
#define MOE_RT_CPU_OPCHECKS_H

#include "moe_rt/ops.h"

#include "../Backend.h"
#include "../Error.h"
#include "OnCuda.h"

#include <cstring>
#include <functional>
#include <string>

namespace moe_rt {
namespace {

float *f32(const moe_rt_tensor *t) {
  return t ? static_cast<float *>(t->data) : nullptr;
}
int64_t *i64(const moe_rt_tensor *t) { return static_cast<int64_t *>(t->data); }

int64_t dim(const moe_rt_tensor *t, int i) {
  return t->shape[i < 0 ? t->rank + i : i];
}

/// A failed check: the status and a message naming the call and operand.
struct Check {
  const char *call;
  /// Where the op's tensors must be: the stream's backend.
  moe_rt_backend backend = MOE_RT_CPU;
  moe_rt_status status = MOE_RT_OK;

  Check &tensor(const moe_rt_tensor *t, const char *name, moe_rt_dtype dtype,
                int minRank = 0, bool optional = false) {
    if (status != MOE_RT_OK)
      return *this;
    if (!t) {
      if (!optional)
        status = fail(MOE_RT_INVALID_ARGUMENT,
                      std::string(call) + ": " + name + " is NULL");
      return *this;
    }
    if (!t->data || t->backend != backend || t->dtype != dtype ||
        t->rank < minRank || moe_rt_tensor_numel(t) < 0)
      status = fail(MOE_RT_INVALID_ARGUMENT,
                    std::string(call) + ": " + name + " must be a " +
                        (backend == MOE_RT_CUDA ? "CUDA " : "CPU ") +
                        (dtype == MOE_RT_I64 ? "I64" : "F32") +
                        " tensor of rank >= " + std::to_string(minRank));
    return *this;
  }
  /// An optional operand, when given, holds exactly `n` elements.
  Check &size(const moe_rt_tensor *t, const char *name, int64_t n) {
    if (status == MOE_RT_OK && t && moe_rt_tensor_numel(t) != n)
      status = fail(MOE_RT_INVALID_ARGUMENT,
                    std::string(call) + ": " + name + " must have " +
                        std::to_string(n) + " elements, not " +
                        std::to_string(moe_rt_tensor_numel(t)));
    return *this;
  }
  /// `t`, when given, has as many elements as `like` (a gradient and its
  /// value, an output and its input).
  Check &sizeOf(const moe_rt_tensor *t, const char *name,
                const moe_rt_tensor *like) {
    return like ? size(t, name, moe_rt_tensor_numel(like)) : *this;
  }
  Check &that(bool ok, const std::string &why) {
    if (status == MOE_RT_OK && !ok)
      status = fail(MOE_RT_INVALID_ARGUMENT, std::string(call) + ": " + why);
    return *this;
  }
};

moe_rt_status enqueue(moe_rt_stream s,
                      std::function<moe_rt_status(std::string &)> task,
                      bool low = false) {
  return s->impl->enqueueHost(std::move(task), low);
}

void zero(moe_rt_tensor *t) {
  if (t)
    std::memset(t->data, 0,
                moe_rt_tensor_numel(t) * moe_rt_dtype_size(t->dtype));
}

} // namespace
} // namespace moe_rt

#endif // MOE_RT_CPU_OPCHECKS_H
