//===- ExpertPlacement.cpp - moe-run's --expert-placement -----------------===//
//
// See ExpertPlacement.h.
//
//===----------------------------------------------------------------------===//

#include "ExpertPlacement.h"
#include "ParamLoading.h"

#include "moe/Target/StepState.h"

#include "moe_rt/collectives.h"

#include <algorithm>

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
  if (groups != o.world)
    return placementError("moving experts to a new placement needs the "
                          "expert-parallel group to be every rank (" +
                          std::to_string(groups) + " of " +
                          std::to_string(o.world) + " here)");
  FunctionOpInterface func = run.step();
  int64_t g = expertGroupIndex(func, o.rank);
  for (BlockArgument arg : target::carriedArguments(func)) {
    if (!target::isExpertArgument(func, arg))
      continue;
    target::Buffer &b = *run.buffer(arg);
    int64_t S = b.shape[0], per = b.numel() / S;
    target::Buffer all;
    all.shape = {groups * S * per};
    all.f.assign(groups * S * per, 0.0f);
    for (int64_t s = 0; s < S; ++s)
      std::copy_n(b.f.begin() + s * per, per,
                  all.f.begin() + from[g * S + s] * per);
    if (moe_rt_all_reduce(sync, world, all.view(), 0, -1) != MOE_RT_OK ||
        moe_rt_stream_synchronize(sync, o.timeout) != MOE_RT_OK)
      return placementError("rank " + std::to_string(o.rank) +
                            ": moving the experts: " + moe_rt_last_error());
    for (int64_t s = 0; s < S; ++s)
      std::copy_n(all.f.begin() + to[g * S + s] * per, per,
                  b.f.begin() + s * per);
  }
  return llvm::Error::success();
}

} // namespace mlir::moe::run
