//===- Passes.td - moe passes ------------------------------*- tablegen -*-===//
//
// One def per pass; the C++ lives in lib/Transforms/<Name>.cpp, the test in
// test/Transforms/<pass-argument>.mlir and the doc in docs/passes/.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TRANSFORMS_PASSES_TD
#define MOE_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def MoeModelSummary : Pass<"moe-model-summary", "::mlir::ModuleOp"> {
  let summary = "Print each model's hyper-parameters, groups, parameter "
                "counts and per-block communication volumes";
  let description = [{
    For every function with a `moe.model` attribute, prints (to stdout, or
    to `output`) the FlowMoE Table 2 view of the model: L, B, N, M, H, E, k,
    f; the device grid and the sizes of its expert-parallel, data-parallel
    and intra-node groups; parameters split into replicated (MHA, gate,
    norms, embeddings, head: all-reduced) and expert (local to a rank) ones;
    and per block the gradient all-reduce bytes and the dispatch all-to-all
    bytes each rank sends. The IR is not changed.
  }];
  let options = [
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "Where to write the summary ('-' for stdout)">,
    Option<"json", "json", "bool", /*default=*/"false",
           "Write JSON instead of text">
  ];
}

def MoeMicrobatch : Pass<"moe-microbatch", "::mlir::ModuleOp"> {
  let summary = "Split every block's tasks into R micro-batches (FlowMoE §3.2)";
  let description = [{
    In every `moe.block` of every model function, splits the block's input
    along the batch dimension into `degree` equal micro-batches with
    `moe.split`, clones the block body once per micro-batch — so that the
    MHA + gate (AT), dispatch (D), expert (E) and combine (C) tasks all come
    in R independent copies, in the MHA layer as well as the MoE layer — and
    merges the R outputs with `moe.merge`. Each cloned op is labelled with
    its task `#moe.task<kind, fwd, block = l, micro = r>`.

    Capacity is per micro-batch: C_r = ceil(f·k·(B/R)·N/E). Without token
    dropping (dropless routing, or no expert over capacity) the step computes
    exactly what the unsplit one does; when tokens are dropped, which ones
    can differ, as in Tutel/ScheMoE's pipelining.

    The loss needs no explicit 1/R factor (FlowMoE App. H): the loss is the
    mean over the merged batch, which equals the mean of the R micro-batch
    losses scaled by 1/R, so accumulated gradients equal the unsplit ones.
  }];
  let options = [
    Option<"degree", "degree", "int64_t", /*default=*/"2",
           "Pipelining degree R (number of micro-batches); must divide B">
  ];
}

def MoeBuildTrainStep : Pass<"moe-build-train-step", "::mlir::ModuleOp"> {
  let summary = "Build the training step: forward, loss, backward, gradient "
                "all-reduce and optimizer update";
  let description = [{
    Turns every model function (one with `moe.model`) into one training
    step, in place:

    1. Labels every forward op with its FlowMoE task (`#moe.task`) and
       inlines the `moe.block` ops; `moe.split` of a `moe.merge` folds, so
       micro-batches flow from block to block.
    2. Reverse-mode differentiation from the returned loss: each forward op
       gets a `moe.vjp` backward task with the same label in phase `bwd`
       (the vjp of a dispatch or combine is a communication task, FlowMoE
       Eqs. 4–5); residual adds fan cotangents out; a value used several
       times — a weight used by R micro-batches — accumulates its gradient
       with `arith.addf` (gradient accumulation across micro-batches).
       The seed is 1/P, P the data-parallel group size, so that summed
       gradients are those of the mean loss over all ranks.
    3. One `moe.all_reduce` per block (`#moe.task<AR, bwd, block = l>`) of
       the gradients of the block's replicated weights (MHA, norms, gate),
       plus one for the weights outside blocks (embeddings, head) on the
       data-parallel group; expert weights stay local under expert
       parallelism.
    4. `moe.sgd` per parameter (`#moe.task<OPT, bwd>`); the function returns
       the loss followed by the updated parameters, in argument order.

    The result is in program order forward → backward → all-reduce →
    update; `moe-schedule` reorders it.
  }];
  let options = [
    Option<"learningRate", "lr", "double", /*default=*/"0.01",
           "SGD learning rate">
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

#endif // MOE_TRANSFORMS_PASSES_TD
