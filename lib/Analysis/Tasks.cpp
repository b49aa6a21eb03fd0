//===- Tasks.cpp - FlowMoE task labels of ops -----------------------------===//

#include "moe/Analysis/Tasks.h"

using namespace mlir;
using namespace mlir::moe;

std::optional<TaskKind> mlir::moe::blockTaskKind(Operation *op) {
  if (isa<DispatchOp>(op))
    return TaskKind::D;
  if (isa<ExpertOp>(op))
    return TaskKind::E;
  if (isa<CombineOp>(op))
    return TaskKind::C;
  // NetMoE (moe-netmoe): the planner starts in the dispatch's task (its
  // solve overlaps the experts), the moves of what follows a sample belong
  // to the placing combine's; the experts' norm, on the expert side, to
  // the experts'.
  if (isa<PlanPlacementOp>(op))
    return TaskKind::D;
  // Expert sharding (FSMoE Fig. 2): the all-gather of the dispatched tokens
  // ends the dispatch, the reduce-scatter of the partial sums starts the
  // combine — communication tasks both, on the intra-node link.
  // Tensor-parallel attention (moe-tensor-parallel): the all-gather of the
  // node's samples and the reduce-scatter of the heads' partial sums belong
  // to the attention's task (still on the intra-node link).
  if (auto gather = dyn_cast<shard::AllGatherOp>(op))
    return llvm::any_of(gather->getUsers(),
                        [](Operation *u) { return isa<AttentionOp>(u); })
               ? TaskKind::AT
               : TaskKind::D;
  if (auto scatter = dyn_cast<shard::ReduceScatterOp>(op))
    return scatter.getInput().getDefiningOp<AttentionOp>() ? TaskKind::AT
                                                           : TaskKind::C;
  // Their variable-count forms (moe.gather_rows / moe.scatter_rows).
  if (isa<GatherRowsOp>(op))
    return TaskKind::D;
  if (isa<MoveSamplesOp, ScatterRowsOp>(op))
    return TaskKind::C;
  if (auto norm = dyn_cast<NormOp>(op);
      norm && norm.getInput().getDefiningOp<DispatchOp>())
    return TaskKind::E;
  // (moe.bias_add: a tensor-parallel attention's output bias.)
  if (isa<AttentionOp, NormOp, GateOp, SharedExpertOp, SigmoidGateOp,
          LinearOp, BiasAddOp>(op))
    return TaskKind::AT;
  return std::nullopt;
}

std::tuple<int, int64_t, int> mlir::moe::backwardPosition(TaskAttr t) {
  if (t.getPhase() == Phase::fwd)
    return {-1, 0, 0};
  switch (t.getKind()) {
  case TaskKind::HEAD:
    return {0, 0, 0};
  case TaskKind::D:
  case TaskKind::E:
  case TaskKind::C:
    return {1, -t.getBlock(), 0};
  case TaskKind::AT:
    return {1, -t.getBlock(), 1};
  case TaskKind::PRE:
    return {2, 0, 0};
  case TaskKind::AR:
  case TaskKind::OPT:
    break;
  }
  return {3, 0, 0};
}

TaskAttr mlir::moe::getTask(Operation *op) {
  return op->getAttrOfType<TaskAttr>(MoeDialect::getTaskAttrName());
}

void mlir::moe::setTask(Operation *op, TaskAttr task) {
  op->setAttr(MoeDialect::getTaskAttrName(), task);
}

void mlir::moe::labelBlockForward(ArrayRef<Operation *> ops, int64_t block,
                                  int64_t micro, int64_t numBlocks) {
  if (ops.empty())
    return;
  MLIRContext *ctx = ops.front()->getContext();
  auto make = [&](TaskKind kind, int64_t b) {
    return TaskAttr::get(ctx, kind, Phase::fwd, b, micro, /*chunk=*/-1);
  };
  TaskAttr next = block + 1 < numBlocks ? make(TaskKind::AT, block + 1)
                                        : make(TaskKind::HEAD, -1);
  SmallVector<Operation *> plumbing;
  for (Operation *op : ops) {
    if (getTask(op) || isa<YieldOp, MergeOp, SplitOp>(op) ||
        op->getNumRegions() != 0)
      continue;
    // After the combine: part of the next block's first task — the
    // residual add, and in a post-norm block (BERT) the norm after it,
    // which would otherwise be an AT task of this block that waits for
    // this block's combine.
    std::optional<TaskKind> kind = blockTaskKind(op);
    bool afterCombine = llvm::any_of(op->getOperands(), [&](Value v) {
      TaskAttr t = v.getDefiningOp() ? getTask(v.getDefiningOp()) : nullptr;
      return t && (t.getKind() == TaskKind::C || t == next);
    });
    if (afterCombine && (!kind || *kind == TaskKind::AT))
      setTask(op, next);
    else if (kind)
      setTask(op, make(*kind, block));
    else
      plumbing.push_back(op);
  }
  // Before the combine: join the task it feeds. Walk backwards so chains of
  // plumbing resolve from their end.
  for (Operation *op : llvm::reverse(plumbing)) {
    // The first labelled user in program order: a residual add feeds both
    // this block's norm and, later, the post-combine add.
    Operation *first = nullptr;
    for (Operation *user : op->getUsers())
      if (getTask(user) && user->getBlock() == op->getBlock() &&
          (!first || user->isBeforeInBlock(first)))
        first = user;
    setTask(op, first ? getTask(first) : make(TaskKind::AT, block));
  }
}
