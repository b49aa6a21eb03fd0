//===- VerifySchedule.cpp - the schedule verifier as a pass ---------------===//

#include "moe/Analysis/ScheduleVerifier.h"
#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Transforms/Passes.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEVERIFYSCHEDULE
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
struct VerifySchedulePass
    : public moe::impl::MoeVerifyScheduleBase<VerifySchedulePass> {
  void runOnOperation() override {
    bool any = false;
    for (auto func : getOperation().getOps<FunctionOpInterface>()) {
      if (!func->hasAttr(MoeDialect::getScheduleAttrName()))
        continue;
      any = true;
      if (failed(verifySchedule(func)))
        return signalPassFailure();
    }
    if (!any) {
      mlir::emitError(getOperation().getLoc())
          << "moe-verify-schedule: no scheduled step (a function with "
             "moe.schedule; run moe-schedule first)";
      return signalPassFailure();
    }
    markAllAnalysesPreserved();
  }
};
} // namespace
