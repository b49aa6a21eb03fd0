//===- Tasks.h - FlowMoE task labels of ops ---------------------*- C++ -*-===//
//
// Which FlowMoE task (§3.2) an op belongs to: AT (MHA + gate), D, E, C, AR,
// and the PRE / HEAD / OPT work around the blocks. Shared by the passes that
// set labels (moe-microbatch, moe-build-train-step) and those that read them
// (moe-schedule, moe-chunk-gradients, the schedule verifier).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_TASKS_H
#define MOE_ANALYSIS_TASKS_H

#include "moe/Dialect/Moe/MoeOps.h"

#include <tuple>

namespace mlir::moe {

/// The kind of a forward op inside a block: D for dispatch, E for experts,
/// C for combine, AT for attention, norms, gates and shared experts;
/// std::nullopt for plumbing (residual adds, splits, merges), which takes
/// the label of the task it feeds.
std::optional<TaskKind> blockTaskKind(Operation *op);

/// Where a task runs in the backward pass, comparable: forward tasks
/// first, then HEAD', then per block l = L-1 .. 0 its MoE layer (C', E',
/// D') before its dense part (AT'), then PRE', then AR and OPT. A gradient
/// produced by task p exists for a window w iff position(p) < position(w)
/// (FSMoE §5's causality).
std::tuple<int, int64_t, int> backwardPosition(TaskAttr task);

/// The op's task label, or null.
TaskAttr getTask(Operation *op);
void setTask(Operation *op, TaskAttr task);

/// Labels the forward ops `ops` (in program order) as block `block`'s tasks for
/// micro-batch `micro`: task ops by blockTaskKind; plumbing before the
/// combine (a residual add feeding a norm) joins the task it feeds; plumbing
/// after the combine (the residual add of the block output) starts the next
/// block's AT task, or HEAD after the last of `numBlocks` blocks, as in
/// FlowMoE where AT^(l+1) consumes C^(l)'s output. Existing labels stay.
void labelBlockForward(ArrayRef<Operation *> ops, int64_t block, int64_t micro,
                       int64_t numBlocks);

} // namespace mlir::moe

#endif // MOE_ANALYSIS_TASKS_H
