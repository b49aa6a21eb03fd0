//===- VariableDropless.cpp - variable-count dropless routing -------------===//
//
// A dropless dispatch (no capacity) has a run-time number of rows per
// expert. Instead of padding every expert to the worst case
// (moe-bound-dropless), this pass keeps the rows variable: the dispatch
// gets a static bound R on the rows any local expert may receive (the
// buffer it writes is E_l x R x M) and a second result `rows : E_l x G`,
// the rows each local expert received from each rank. The expert computes
// over its filled rows only and the combine sends only those back
// (runtime: moe_rt_dispatch_v / _expert_v / _combine_v).
//
// The default bound is the worst case G·T: a token picks k distinct
// experts, so one rank sends an expert at most its T tokens.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEVARIABLEDROPLESS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

struct VariableDroplessPass
    : public moe::impl::MoeVariableDroplessBase<VariableDroplessPass> {
  using MoeVariableDroplessBase::MoeVariableDroplessBase;

  /// The bound of `dispatch`: the option, or the worst case G·T.
  FailureOr<int64_t> boundOf(DispatchOp dispatch, int64_t group) {
    auto input = cast<RankedTensorType>(dispatch.getInput().getType());
    if (!input.hasStaticShape())
      return dispatch.emitOpError() << "needs a static token shape to bound "
                                       "its dropless routing, got "
                                    << input;
    if (bound < 0)
      return dispatch.emitOpError()
             << "bound must be positive (or 0 for the worst case), got "
             << static_cast<int64_t>(bound);
    int64_t tokens = input.getNumElements() / input.getShape().back();
    return bound > 0 ? static_cast<int64_t>(bound) : group * tokens;
  }

  /// Replaces `old` by a variable-count dispatch; wires its rows into the
  /// experts and combines of its routing.
  LogicalResult convert(DispatchOp old) {
    auto type = cast<RankedTensorType>(old.getResult().getType());
    if (cast<ShapedType>(old.getIndices().getType()).getRank() != 3)
      return old.emitOpError() << "expert-choice routing always has a "
                                  "capacity; nothing to make variable";
    int64_t local = type.getDimSize(0);
    if (ShapedType::isDynamic(local) || old.getNumExperts() % local)
      return old.emitOpError() << "needs a static number of local experts";
    int64_t group = old.getNumExperts() / local;
    FailureOr<int64_t> rowsBound = boundOf(old, group);
    if (failed(rowsBound))
      return failure();
    OpBuilder b(old);
    auto rowsType = RankedTensorType::get({local, group}, b.getI32Type());
    auto dispatch = DispatchOp::create(
        b, old.getLoc(), withDim(type, 1, *rowsBound), rowsType, old.getInput(),
        old.getIndices(), old.getCounts(), old.getExpertSlots(),
        old.getAllCounts(), old.getGridAttr(), old.getAxesAttr(), old.getNumExpertsAttr(),
        /*capacity=*/nullptr,
        /*slots=*/nullptr, b.getI64IntegerAttr(*rowsBound), /*part=*/nullptr);
    // Discardable attributes (a task label) stay with the op.
    for (NamedAttribute attr : old->getDiscardableAttrs())
      dispatch->setAttr(attr.getName(), attr.getValue());
    old.getResult().replaceAllUsesWith(dispatch.getResult());
    old.erase();
    Value rows = dispatch.getRows();
    auto rowsLayout = cast<RankedTensorType>(dispatch.getResult().getType());
    auto wireExpert = [&](Operation *user) -> LogicalResult {
      auto expert = dyn_cast<ExpertOp>(user);
      if (!expert)
        return user->emitOpError() << "uses a variable-count dispatch's "
                                      "rows; only moe.expert may";
      expert.getRowsMutable().assign(rows);
      expert.getResult().setType(rowsLayout);
      return success();
    };
    for (Operation *user : dispatch.getResult().getUsers()) {
      // NetMoE (moe-netmoe): the combine carries the dispatched residual
      // rows, and the experts read them through their norm.
      auto combine = dyn_cast<CombineOp>(user);
      if (combine && combine.getResidual() == dispatch.getResult())
        continue;
      if (auto norm = dyn_cast<NormOp>(user)) {
        norm.getResult().setType(rowsLayout);
        for (Operation *normUser : norm.getResult().getUsers())
          if (failed(wireExpert(normUser)))
            return failure();
        continue;
      }
      if (failed(wireExpert(user)))
        return failure();
    }
    for (Operation *user : dispatch.getIndices().getUsers())
      if (auto combine = dyn_cast<CombineOp>(user))
        if (!combine.getCapacity() && !combine.getRows())
          combine.getRowsMutable().assign(rows);
    return success();
  }

  void runOnOperation() override {
    SmallVector<DispatchOp> todo;
    getOperation()->walk([&](DispatchOp d) {
      if (!d.getCapacity() && !d.isVariable())
        todo.push_back(d);
    });
    for (DispatchOp d : todo)
      if (failed(convert(d)))
        return signalPassFailure();
  }
};

} // namespace
