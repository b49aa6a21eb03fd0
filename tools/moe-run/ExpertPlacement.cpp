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
                           const moe_rt::expert_placement::Placement &from,
                           const moe_rt::expert_placement::Placement &to,
                           moe_rt_stream sync, moe_rt_comm world) {
  namespace ep = moe_rt::expert_placement;
  const target::Interpreter::Options &o = run.options();
  FunctionOpInterface func = run.step();
  moe_rt::checkpoint::Manifest m = target::checkpointManifest(func);
  int64_t g = moe_rt::checkpoint::expertIndex(m.grid, m.epAxes, o.rank);
  int64_t replica = moe_rt::checkpoint::replicaIndex(m.grid, m.epAxes, o.rank);
  auto shapes = placementShapes(func);
  // The runtime's step support moves each tensor: one implementation for
  // moe-run and generated steps (moe_step_set_expert_slots).
  for (BlockArgument arg : target::carriedArguments(func)) {
    if (!target::isExpertArgument(func, arg))
      continue;
    int64_t block = target::expertBlock(func, arg);
    auto shape = shapes.find(block);
    if (shape == shapes.end())
      return placementError("expert tensor '" +
                            target::argumentName(func, arg) +
                            "' belongs to no placed block");
    std::vector<int64_t> a = ep::tableOf(from, block, shape->second),
                         b2 = ep::tableOf(to, block, shape->second);
    if (a == b2)
      continue; // this block's experts stay
    target::Buffer &b = *run.buffer(arg);
    int64_t S = b.shape[0];
    if (moe_step_move_experts(sync, world, o.timeout, b.f.data(), S,
                              b.numel() / S, a.data(), b2.data(), g,
                              shape->second.groups, replica) != MOE_RT_OK)
      return placementError("rank " + std::to_string(o.rank) +
                            ": moving the experts: " + moe_rt_last_error());
  }
  return llvm::Error::success();
}

} // namespace mlir::moe::run
