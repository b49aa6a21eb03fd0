//===- OpChecks.h - argument checks of the op calls -------------*- C++ -*-===//
//
// Shared by the op entry points (DenseOps.cpp, GateOps.cpp, ...): every
// call checks its arguments the same way and reports the same messages.
// The older calls (RoutingOps.cpp, OptimizerOps.cpp) keep their one-line
// messages and test their tensors with isOn / oneSizeF32.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_API_OPCHECKS_H
#define MOE_RT_API_OPCHECKS_H

#include "moe_rt/ops.h"

#include "../Backend.h"
#include "../Error.h"
#include "../TensorAccess.h"
#include "OnCuda.h"

#include <initializer_list>
#include <string>

namespace moe_rt {
namespace {

/// A tensor of `dtype` with data on `backend` (the stream's) and a valid
/// shape.
inline bool isOn(const moe_rt_tensor *t, moe_rt_dtype dtype,
                 moe_rt_backend backend) {
  return t && t->data && t->backend == backend && t->dtype == dtype &&
         moe_rt_tensor_numel(t) >= 0;
}

/// The same, holding exactly `numel` elements.
inline bool isOn(const moe_rt_tensor *t, moe_rt_dtype dtype,
                 moe_rt_backend backend, int64_t numel) {
  return t && t->data && t->backend == backend && t->dtype == dtype &&
         moe_rt_tensor_numel(t) == numel;
}

/// `s` is a stream and `ts` are F32 tensors on its backend, each with as
/// many elements as the first (an elementwise op's operands and result).
inline bool oneSizeF32(moe_rt_stream s,
                       std::initializer_list<const moe_rt_tensor *> ts) {
  if (!s)
    return false;
  const moe_rt_tensor *first = *ts.begin();
  for (const moe_rt_tensor *t : ts)
    if (!isOn(t, MOE_RT_F32, backendOf(s)) ||
        moe_rt_tensor_numel(t) != moe_rt_tensor_numel(first))
      return false;
  return true;
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

} // namespace
} // namespace moe_rt

#endif // MOE_RT_API_OPCHECKS_H
