//===- VerifySchedule.cpp - the schedule verifier as a pass ---------------===//

#include "moe/Analysis/ScheduleVerifier.h"
#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Transforms/PassUtils.h"
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
    auto steps = functionsWith(
        getOperation(), MoeDialect::getScheduleAttrName(),
        "moe-verify-schedule",
        "no scheduled step (a function with moe.schedule; run moe-schedule "
        "first)");
    if (failed(steps))
      return signalPassFailure();
    for (FunctionOpInterface func : *steps)
      if (failed(verifySchedule(func)))
        return signalPassFailure();
    markAllAnalysesPreserved();
  }
};
} // namespace
