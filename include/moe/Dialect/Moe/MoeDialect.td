//===- MoeDialect.td - the moe dialect ---------------------*- tablegen -*-===//
//
// The `moe` dialect: Mixture-of-Experts transformer semantics (attention,
// routing, expert FFNs, all-to-all dispatch/combine, gradient all-reduce) and
// the scheduling vocabulary the FlowMoE-family passes need (streams, events,
// micro-batches, gradient chunks). Device grids and groups reuse the upstream
// `shard` dialect: collectives name a `shard.grid` symbol and grid axes.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_TD
#define MOE_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Moe_Dialect : Dialect {
  let name = "moe";
  let cppNamespace = "::mlir::moe";
  let summary = "Mixture-of-Experts training steps and their schedules";
  let description = [{
    The `moe` dialect describes a Mixture-of-Experts (MoE) transformer and,
    after the scheduling passes, the distributed training step that runs it.

    A model is a `func.func` carrying a `moe.model` attribute (the
    hyper-parameters L, B, N, M, H, E, k, f of FlowMoE Table 2 and the device
    grid with its expert-parallel, data-parallel and intra-node groups). Its
    body holds one `moe.block` per transformer block; inside a block,
    `moe.attention`, `moe.gate`, `moe.dispatch`, `moe.expert`, `moe.combine`
    (and `moe.shared_expert` for DeepSeek-style shared experts) are chained
    with `arith`/`tensor` plumbing for residuals.

    Collectives (`moe.dispatch`, `moe.combine`, `moe.all_reduce`) name a
    `shard.grid` and the grid axes of their group, exactly as upstream
    `shard` collectives do, so that a 2 x 8 grid reads as 2 nodes x 8 GPUs
    per node, axis 1 being the intra-node group.

    Scheduling adds a `moe.stream` attribute to every task op (compute or
    communication stream), `moe.record_event` / `moe.wait_event` for
    cross-stream dependencies, `moe.split` / `moe.merge` for micro-batches and
    byte ranges on `moe.all_reduce` for gradient chunks. Program order within
    one stream is issue order.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::func::FuncDialect",
    "::mlir::shard::ShardDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  // Verifies the discardable `moe.model` and `moe.stream` attributes.
  let hasOperationAttrVerify = 1;
  // Verifies `moe.param` names on function arguments.
  let hasRegionArgAttrVerify = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
    void registerTypes();

    /// Name of the function attribute that holds a `#moe.model`.
    static constexpr ::llvm::StringLiteral getModelAttrName() {
      return ::llvm::StringLiteral("moe.model");
    }
    /// Name of the discardable attribute that puts a task on a stream.
    static constexpr ::llvm::StringLiteral getStreamAttrName() {
      return ::llvm::StringLiteral("moe.stream");
    }
    /// Name of the discardable attribute labelling an op's FlowMoE task.
    static constexpr ::llvm::StringLiteral getTaskAttrName() {
      return ::llvm::StringLiteral("moe.task");
    }
    /// Name of the function attribute recording the scheduling policy.
    static constexpr ::llvm::StringLiteral getScheduleAttrName() {
      return ::llvm::StringLiteral("moe.schedule");
    }
    /// Name of the argument attribute naming a parameter (e.g. "block0.wq").
    static constexpr ::llvm::StringLiteral getParamAttrName() {
      return ::llvm::StringLiteral("moe.param");
    }
    /// Name of the argument attribute saying where an imported parameter's
    /// values are (docs/frontend/builder.md): {file, names, stacked,
    /// transpose, slice, scale}.
    static constexpr ::llvm::StringLiteral getSourceAttrName() {
      return ::llvm::StringLiteral("moe.source");
    }
    /// Name of the argument attribute marking optimizer state carried from
    /// step to step (docs/optimizers.md): "<param>.<slot>", the slot as
    /// torch.optim names it (exp_avg, exp_avg_sq, momentum_buffer).
    static constexpr ::llvm::StringLiteral getStateAttrName() {
      return ::llvm::StringLiteral("moe.state");
    }
    /// Name of the argument attribute marking a value the host gives each
    /// step: "lr" (the schedule's learning rate) or "step" (the 1-based
    /// update count, for AdamW's bias correction).
    static constexpr ::llvm::StringLiteral getStepInputAttrName() {
      return ::llvm::StringLiteral("moe.step_input");
    }
    /// Name of the function attribute holding the learning-rate schedule
    /// the host evaluates for the "lr" step input: {kind = "constant" |
    /// "cosine", lr, warmup, total, min_lr}.
    static constexpr ::llvm::StringLiteral getLrScheduleAttrName() {
      return ::llvm::StringLiteral("moe.lr_schedule");
    }
    /// Name of the discardable attribute on a forward moe.dispatch holding
    /// its MoE layer's token degrees [r_fwd, r_bwd] (moe-fsmoe-plan, read
    /// by moe-token-pipeline).
    static constexpr ::llvm::StringLiteral getTokenDegreeAttrName() {
      return ::llvm::StringLiteral("moe.token_degree");
    }
    /// Name of the discardable attribute on a gradient all-reduce slice
    /// naming the backward window it is reduced in (FSMoE §5): the task it
    /// overlaps, E'^l (block l's MoE layer) or AT'^l (its dense part).
    static constexpr ::llvm::StringLiteral getGradientWindowAttrName() {
      return ::llvm::StringLiteral("moe.gradient_window");
    }
    /// Name of the argument attribute marking an expert weight sharded by
    /// expert-sharding parallelism (moe-expert-sharding, FSMoE §2): [dim,
    /// shards] — the rank holds part j (its coordinate on the model's
    /// intra-node axes) of `shards` equal parts along `dim` of the plain
    /// step's weight of the same experts.
    static constexpr ::llvm::StringLiteral getHiddenShardAttrName() {
      return ::llvm::StringLiteral("moe.hidden_shard");
    }
    /// Name of the argument attribute marking an attention weight sharded
    /// by tensor-parallel attention (moe-tensor-parallel, Megatron): [dim,
    /// shards] — the rank holds part j (its coordinate on the model's
    /// intra-node axes) of `shards` equal parts along `dim` of the plain
    /// step's (replicated) weight, i.e. the weights of its heads.
    static constexpr ::llvm::StringLiteral getHeadShardAttrName() {
      return ::llvm::StringLiteral("moe.head_shard");
    }
  }];
}

class Moe_Op<string mnemonic, list<Trait> traits = []> :
    Op<Moe_Dialect, mnemonic, traits>;

#endif // MOE_DIALECT_TD
