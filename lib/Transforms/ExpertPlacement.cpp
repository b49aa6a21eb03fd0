//===- ExpertPlacement.cpp - the expert placement as a step input ---------===//
//
// Placement as a run-time value (docs/load-aware.md §2): gives the
// scheduled step one step input per MoE block, `expert_slots.<block> :
// G x S` (moe.step_input = "expert_slots.<block>", the block of moe.task),
// and passes it to that block's variable-count dispatches and combines, so the host (moe-run --expert-placement, the generated step's
// moe_step_set_expert_slots) decides which rank holds which expert without
// recompiling. Each vjp's body op gets it as one more primal, so backward
// routes by the same map.
// Each block has its own table, so a planner can move the experts of one
// layer only; the ops do not change.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

#include "moe_rt/expert_placement.h"

#include <map>

namespace mlir::moe {
#define GEN_PASS_DEF_MOEEXPERTPLACEMENT
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// The block (moe.task's) of a variable-count op; in a vjp's body, the
/// vjp's. -1 when it has none.
int64_t blockOf(Operation *op) {
  if (auto vjp = dyn_cast<VjpOp>(op->getParentOp()))
    op = vjp;
  auto task = op->getAttrOfType<TaskAttr>(MoeDialect::getTaskAttrName());
  return task ? task.getBlock() : -1;
}

/// One block's variable-count ops and their slot table shape (G, S).
struct BlockOps {
  SmallVector<Operation *> ops;
  int64_t groups = -1, slots = -1;
};

/// The variable-count ops of `func` by block; fails on an op without a
/// block, or whose group or expert count differs from its block's, or
/// when there is none.
LogicalResult collect(FunctionOpInterface func,
                      std::map<int64_t, BlockOps> &blocks) {
  SymbolTableCollection table;
  auto add = [&](Operation *op, FlatSymbolRefAttr grid, ArrayRef<int16_t> axes,
                 int64_t experts) -> LogicalResult {
    FailureOr<shard::GridOp> g = lookupGrid(op, grid, table);
    if (failed(g))
      return failure();
    FailureOr<int64_t> size = verifyGroupSize(op, *g, axes);
    if (failed(size))
      return failure();
    int64_t block = blockOf(op);
    if (block < 0)
      return op->emitOpError()
             << "expert placement: the op has no block (moe.task with "
                "block = L): each block gets its own table";
    BlockOps &b = blocks[block];
    if (b.groups >= 0 && (b.groups != *size || b.slots != experts / *size))
      return op->emitOpError()
             << "expert placement: block " << block << "'s ops share one "
             << "table, but this op has " << experts << " experts over "
             << *size << " ranks where an earlier one has "
             << b.groups * b.slots << " over " << b.groups;
    b.groups = *size;
    b.slots = experts / *size;
    b.ops.push_back(op);
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
  if (blocks.empty())
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
      std::map<int64_t, BlockOps> blocks;
      if (failed(collect(func, blocks)))
        return signalPassFailure();
      MLIRContext *ctx = func->getContext();
      Builder b(ctx);
      // One step input per block, in block order, named by its block.
      for (auto &[block, ops] : blocks) {
        unsigned index = func.getNumArguments();
        NamedAttribute role(
            StringAttr::get(ctx, MoeDialect::getStepInputAttrName()),
            b.getStringAttr(
                moe_rt::expert_placement::slotsInputName(block)));
        auto type =
            RankedTensorType::get({ops.groups, ops.slots}, b.getI64Type());
        if (failed(func.insertArgument(
                index, type, DictionaryAttr::get(ctx, role), func.getLoc())))
          return signalPassFailure();
        Value table = func.getArgument(index);
        for (Operation *op : ops.ops)
          wire(op, table);
      }
    }
  }
};

} // namespace
