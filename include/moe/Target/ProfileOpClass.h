//===- ProfileOpClass.h - an op's class in a runtime profile ----*- C++ -*-===//
//
// moe-run --profile and generated steps (MOE_RT_PROFILE=1) charge each
// task to the op class of the IR op that queued it (moe_rt/profile.h):
// its name, and for a moe.vjp the forward op's, "moe.vjp(moe.expert)". One
// definition, so that both report the same classes.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TARGET_PROFILEOPCLASS_H
#define MOE_TARGET_PROFILEOPCLASS_H

#include "moe/Dialect/Moe/MoeOps.h"

#include <string>

namespace mlir::moe::target {

inline std::string profileOpClass(Operation *op) {
  std::string name = op->getName().getStringRef().str();
  if (auto vjp = dyn_cast<VjpOp>(op))
    if (Operation *fwd = vjp.getForwardOp())
      name += "(" + fwd->getName().getStringRef().str() + ")";
  return name;
}

} // namespace mlir::moe::target

#endif // MOE_TARGET_PROFILEOPCLASS_H
