//===- ExpertPlacement.cpp - the expert placement as a step input ---------===//
//
// Placement as a run-time value (docs/load-aware.md §2): gives the
// scheduled step one step input, `expert_slots : G x S` (moe.step_input =
// "expert_slots"), and passes it to every variable-count dispatch and
// combine, so the host (moe-run --expert-placement, the generated step's
// moe_step_set_expert_slots) decides which rank holds which expert without
// recompiling. Each vjp's body op gets it as one more primal, so backward
// routes by the same map.
// One table serves every block: a planner that places blocks differently
// feeds each op its own operand (the op does not change).
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEEXPERTPLACEMENT
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// The variable-count ops of `func` and their common slot table shape
/// (G, S); fails on the first op whose group or expert count differs, or
/// when there is none.
LogicalResult collect(FunctionOpInterface func, SmallVector<Operation *> &ops,
                      int64_t &groups, int64_t &slots) {
  SymbolTableCollection table;
  groups = slots = -1;
  auto add = [&](Operation *op, FlatSymbolRefAttr grid, ArrayRef<int16_t> axes,
                 int64_t experts) -> LogicalResult {
    FailureOr<shard::GridOp> g = lookupGrid(op, grid, table);
    if (failed(g))
      return failure();
    FailureOr<int64_t> size = verifyGroupSize(op, *g, axes);
    if (failed(size))
      return failure();
    if (groups >= 0 && (groups != *size || slots != experts / *size))
      return op->emitOpError()
             << "expert placement: one table serves every block, but this "
                "op has "
             << experts << " experts over " << *size << " ranks where an "
             << "earlier one has " << groups * slots << " over " << groups;
    groups = *size;
    slots = experts / *size;
    ops.push_back(op);
    return success();
  };
  WalkResult walk = func->walk([&](Operation *op) {
    LogicalResult ok = success();
    if (auto d = dyn_cast<DispatchOp>(op); d && d.isVariable())
      ok = add(op, d.getGridAttr(), d.getAxes(), d.getNumExperts());
    else if (auto c = dyn_cast<CombineOp>(op); c && c.getRows())
      ok = add(op, c.getGridAttr(), c.getAxes(), c.getNumExperts());
    return failed(ok) ? WalkResult::interrupt() : WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, MoeDialect::getHiddenShardAttrName()))
      return func.emitOpError()
             << "expert placement: expert-sharded weights (moe.hidden_shard "
                "on argument #"
             << i << ", esp=1) are not placed yet";
  if (ops.empty())
    return func.emitOpError()
           << "expert placement needs variable-count dropless routing "
              "(moe-variable-dropless); the step has none";
  return success();
}

/// Gives `op` the table. The body op of a vjp takes its vjp's body
/// arguments, in order: there the table becomes one more primal (the last
/// operand of dispatch and combine alike), an integer with no gradient.
void wire(Operation *op, Value table) {
  if (auto vjp = dyn_cast<VjpOp>(op->getParentOp())) {
    vjp.getPrimalsMutable().append(table);
    table = vjp.getBody().front().addArgument(table.getType(), op->getLoc());
  }
  if (auto d = dyn_cast<DispatchOp>(op))
    d.getExpertSlotsMutable().assign(table);
  else
    cast<CombineOp>(op).getExpertSlotsMutable().assign(table);
}

struct ExpertPlacementPass
    : public moe::impl::MoeExpertPlacementBase<ExpertPlacementPass> {
  void runOnOperation() override {
    auto steps = functionsWith(
        getOperation(), MoeDialect::getScheduleAttrName(),
        "moe-expert-placement",
        "no scheduled step (a function with moe.schedule; run moe-schedule "
        "first)");
    if (failed(steps))
      return signalPassFailure();
    for (FunctionOpInterface func : *steps) {
      SmallVector<Operation *> ops;
      int64_t groups, slots;
      if (failed(collect(func, ops, groups, slots)))
        return signalPassFailure();
      MLIRContext *ctx = func->getContext();
      Builder b(ctx);
      unsigned index = func.getNumArguments();
      NamedAttribute role(
          StringAttr::get(ctx, MoeDialect::getStepInputAttrName()),
          b.getStringAttr("expert_slots"));
      auto type = RankedTensorType::get({groups, slots}, b.getI64Type());
      if (failed(func.insertArgument(
              index, type, DictionaryAttr::get(ctx, role), func.getLoc())))
        return signalPassFailure();
      Value table = func.getArgument(index);
      for (Operation *op : ops)
        wire(op, table);
    }
  }
};

} // namespace
