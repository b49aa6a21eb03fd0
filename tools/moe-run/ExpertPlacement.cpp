//===- ExpertPlacement.cpp - moe-run's --expert-placement -----------------===//
//
// See ExpertPlacement.h.
//
//===----------------------------------------------------------------------===//

#include "ExpertPlacement.h"
#include "ParamLoading.h"

#include "moe/Target/StepState.h"

#include "moe_rt/step_support.h"

using namespace mlir;
using namespace mlir::moe;

namespace mlir::moe::run {

static llvm::Error placementError(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

llvm::Error migrateExperts(target::Interpreter &run,
                           const std::vector<int64_t> &from,
                           const std::vector<int64_t> &to, int64_t groups,
                           moe_rt_stream sync, moe_rt_comm world) {
  const target::Interpreter::Options &o = run.options();
  FunctionOpInterface func = run.step();
  int64_t g = expertGroupIndex(func, o.rank);
  // The runtime's step support moves each tensor: one implementation for
  // moe-run and generated steps (moe_step_set_expert_slots).
  for (BlockArgument arg : target::carriedArguments(func)) {
    if (!target::isExpertArgument(func, arg))
      continue;
    target::Buffer &b = *run.buffer(arg);
    int64_t S = b.shape[0];
    if (moe_step_move_experts(sync, world, o.timeout, b.f.data(), S,
                              b.numel() / S, from.data(), to.data(), g,
                              groups) != MOE_RT_OK)
      return placementError("rank " + std::to_string(o.rank) +
                            ": moving the experts: " + moe_rt_last_error());
  }
  return llvm::Error::success();
}

} // namespace mlir::moe::run
