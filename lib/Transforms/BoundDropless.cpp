//===- BoundDropless.cpp - static capacity for dropless routing -----------===//
//
// A dropless gate routes each token to k distinct experts, so one rank can
// send an expert at most T = B·N tokens. Capacity C >= T therefore never
// drops anything: the step computes exactly what dropless routing does, with
// static `E_l x G·C x M` expert tensors that every backend can allocate up
// front. f = E/k gives C = ceil(f·k·T/E) = T (or T + 1 when E/k is not a
// 6-decimal number and is rounded up).
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include <cmath>

namespace mlir::moe {
#define GEN_PASS_DEF_MOEBOUNDDROPLESS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

struct BoundDroplessPass
    : public moe::impl::MoeBoundDroplessBase<BoundDroplessPass> {
  using MoeBoundDroplessBase::MoeBoundDroplessBase;

  /// Bounds one gate and the dispatch / expert / combine ops that use its
  /// routing; returns the capacity factor it chose.
  FailureOr<double> bound(GateOp gate) {
    if (gate.isExpertChoice())
      return gate.emitOpError() << "is expert choice, which always has a "
                                   "capacity; nothing to bound";
    auto input = cast<RankedTensorType>(gate.getInput().getType());
    if (!input.hasStaticShape())
      return gate.emitOpError() << "needs a static token shape to bound its "
                                   "dropless routing, got "
                                << input;
    int64_t tokens = input.getNumElements() / input.getShape().back();
    double f = std::ceil(double(gate.getNumExperts()) / gate.getTopK() * 1e6) /
               1e6;
    int64_t capacity =
        expertCapacity(f, gate.getTopK(), tokens, gate.getNumExperts());
    Builder b(gate.getContext());
    gate.setCapacityFactorAttr(b.getF64FloatAttr(f));
    gate.setCapacity(capacity);
    for (Operation *user : gate.getIndices().getUsers()) {
      if (auto dispatch = dyn_cast<DispatchOp>(user)) {
        auto type = cast<RankedTensorType>(dispatch.getResult().getType());
        int64_t group = dispatch.getNumExperts() / type.getDimSize(0);
        dispatch.setCapacity(capacity);
        dispatch.getResult().setType(withDim(type, 1, group * capacity));
        // Experts map slots to slots: they take the dispatch's new type.
        for (Operation *e : dispatch->getUsers())
          if (auto expert = dyn_cast<ExpertOp>(e))
            expert.getResult().setType(dispatch.getResult().getType());
      } else if (auto combine = dyn_cast<CombineOp>(user)) {
        combine.setCapacity(capacity);
      }
    }
    return f;
  }

  void runOnOperation() override {
    for (auto func : getOperation().getOps<FunctionOpInterface>()) {
      auto model =
          func->getAttrOfType<ModelAttr>(MoeDialect::getModelAttrName());
      std::optional<double> chosen;
      WalkResult walk = func->walk([&](GateOp gate) {
        if (gate.getCapacity())
          return WalkResult::advance();
        FailureOr<double> f = bound(gate);
        if (failed(f))
          return WalkResult::interrupt();
        chosen = *f;
        return WalkResult::advance();
      });
      if (walk.wasInterrupted())
        return signalPassFailure();
      if (!chosen || !model || !model.isDropless())
        continue;
      func->setAttr(
          MoeDialect::getModelAttrName(),
          ModelAttr::get(model.getContext(), model.getLayers(),
                         model.getBatch(), model.getSeq(), model.getEmbed(),
                         model.getHidden(), model.getExperts(),
                         model.getTopK(), llvm::APFloat(*chosen),
                         model.getGrid(), model.getEpAxes(),
                         model.getDpAxes(), model.getIntraAxes()));
    }
  }
};

} // namespace
