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

def MoeBoundDropless : Pass<"moe-bound-dropless", "::mlir::ModuleOp"> {
  let summary = "Give dropless routing a capacity no expert can exceed, so "
                "the step has static shapes";
  let description = [{
    Dropless routing (`moe.gate` without a capacity: Mixtral, DeepSeek,
    Qwen-MoE) makes the dispatched token count a run-time value
    (`E_l x ? x M`). This pass bounds it: every dropless token-choice gate
    gets the capacity factor f = E/k (rounded up to 10^-6), so C =
    ceil(f·k·T/E) >= T, the rank's tokens, and since a token picks k
    distinct experts no expert can receive more than T of them: no token
    is ever dropped and the numerics are those of dropless routing. Dispatch,
    expert and combine get the static `E_l x G·C x M` types and the model
    attribute the same f.

    The cost is padding: each expert's slots hold up to E/k times the
    average load, and the runtime computes over empty slots too. That is
    what lets the CPU runtime, `moe-run` and generated code run a dropless
    model today; the simulator should see the unbounded model (its dropless
    cost is the average load), so the named pipeline does not add this
    pass.
  }];
}

def MoeVariableDropless : Pass<"moe-variable-dropless", "::mlir::ModuleOp"> {
  let summary = "Route dropless tokens with variable counts (all-to-all-v) "
                "into a bounded expert buffer";
  let description = [{
    Gives every dropless token-choice `moe.dispatch` (no capacity, a dynamic
    `E_l x ? x M` result) a static per-rank bound R and a `rows : E_l x G`
    result, and passes `rows` to the `moe.expert` and `moe.combine` of that
    routing. The runtime then exchanges each rank's per-expert counts,
    moves only the routed tokens (all-to-all-v) and runs each expert over
    its filled rows only; nothing is padded to a capacity and nothing is
    ever dropped. A step whose routing sends more than R rows to one local
    expert fails on every rank with an error naming the block, the expert
    and the load.

    `bound` is R; 0 (the default) is the worst case G·T — each of the G
    ranks sends at most its T = B·N tokens to one expert, since a token
    picks k distinct experts — which can never be exceeded. A smaller bound
    saves memory (the expert buffer is E_l x R x M), not time. Gates with a
    capacity (GShard/Switch) keep the padded path; `moe-flowmoe-pipeline`
    runs this pass after `moe-microbatch`, and it does nothing to a model
    `moe-bound-dropless` has already bounded.
  }];
  let options = [
    Option<"bound", "bound", "int64_t", /*default=*/"0",
           "Rows each local expert may receive per step (0: the worst "
           "case G*B*N)">
  ];
}

def MoeExpertSharding : Pass<"moe-expert-sharding", "::mlir::ModuleOp"> {
  let summary = "FSMoE's expert-sharding parallelism: each expert's hidden "
                "dimension over a node's ranks (all-gather, reduce-scatter)";
  let description = [{
    FSMoE §2.2 / Fig. 2 (docs/passes/moe-expert-sharding.md), on the forward
    model before `moe-microbatch`. The experts are spread over the nodes
    (the model's `ep_axes` without its `intra_axes`) and each expert's
    hidden dimension H over the S ranks of a node (`intra_axes`): every
    MoE layer becomes

    ```mlir
    %d = moe.dispatch ... on @cluster axes = [0]        // E/N x (N C) x M
    %g = shard.all_gather %d on @cluster grid_axes = [1] gather_axis = 1
    %y = moe.expert ... %g up(%up) down(%down)          // H/S: partial sums
    %r = shard.reduce_scatter %y on @cluster grid_axes = [1] scatter_axis = 1
    %c = moe.combine %r, ... on @cluster axes = [0]
    ```

    and every expert weight the rank's shard of the plain step's, marked
    `moe.hidden_shard = [dim, S]` (its part is the rank's coordinate on
    the intra axes), so that moe-run and moe-export-params start from the
    same model as the plain step. `moe-build-train-step` differentiates
    each collective into the other. Capacity-routed token choice or expert
    choice layers `dispatch -> expert -> combine` only; a layer it cannot
    shard is named.

    A dropless model is sharded on its variable-count path, after
    `moe-variable-dropless` (the pipeline runs this pass a second time
    there, `routing=variable`): `moe.gather_rows` (an all-gather-v of each
    local expert's filled rows, counts exchanged first) before the
    experts and `moe.scatter_rows` (the reduce-scatter-v back) after them
    take the shard collectives' places.
  }];
  let options = [
    Option<"routing", "routing", "std::string", "\"any\"",
           "Which models to shard: `any` (a capacity-routed model, or a "
           "dropless one already made variable-count), `capacity` (leave "
           "dropless models for a later run) or `variable` (leave "
           "capacity-routed models)">
  ];
}

def MoeTensorParallel : Pass<"moe-tensor-parallel", "::mlir::ModuleOp"> {
  let summary = "Tensor-parallel attention over a node's ranks (Megatron "
                "column/row split; all-gather, reduce-scatter of samples)";
  let description = [{
    FSMoE's MP (seeds/001 §2.2, N_MP = N_ESP;
    docs/passes/moe-tensor-parallel.md), on the forward model before
    `moe-microbatch`. Every `moe.attention` runs on the node's samples with
    the rank's share of the heads:

    ```mlir
    %g = shard.all_gather %x on @cluster grid_axes = [1] gather_axis = 0
    %p = moe.attention %g weights(%wq, %wk, %wv, %wo) heads = H/S
           kv_heads = K/S ...                          // partial sums
    %a = shard.reduce_scatter %p on @cluster grid_axes = [1] scatter_axis = 0
    ```

    The S ranks of a node are the model's `intra_axes`; outside attention
    each rank keeps its own samples, as in the plain step. Wq, Wk, Wv and
    their biases become column shards by whole heads, Wo a row shard, each
    marked `moe.head_shard = [dim, S]` (its part is the rank's coordinate
    on the intra axes) so that moe-run and moe-export-params start from
    the plain step's model. Refused by name: heads or kv_heads not
    divisible by S, an out_bias, a weight shared with another op, a node
    of one rank, NetMoE models.
  }];
}

def MoeNetMoe : Pass<"moe-netmoe", "::mlir::ModuleOp"> {
  let summary = "NetMoE: place whole samples at every MoE block's combine "
                "(dynamic sample placement, residual inlined)";
  let description = [{
    NetMoE (seeds/002 §3.2, docs/netmoe-in-the-step.md) on the forward
    model, before `moe-microbatch`. In every `moe.block` whose MoE layer is
    `x -> norm -> gate -> dispatch -> expert -> combine -> x + combine`
    (pre-norm, dropless token choice):
    - `moe.routing_counts` of the gate's indices and a `moe.plan_placement`
      on them, right after the dispatch (the two-stage solve runs on a host
      thread while the experts compute; the combine joins it);
    - the dispatch sends `x` itself and the experts' norm moves to the
      expert side (App. A's residual inlining), so the combine carries
      `x + sum_k w_k y_k` straight to each sample's new rank
      (`residual(...) to(...)`): no send-back;
    - the labels follow the samples: they become a block input and result,
      moved by `moe.move_samples` after the combine, and the loss reads the
      last block's.
    Backward reuses each placement (the combine's vjp). `predict=false`
    marks every planner `gather_only` (the next block's dispatch is not
    priced). `identity` keeps every sample in place (the same step, with the residual inlined);
    `follow` is for tests only: `no-residual` / `no-labels` deliberately
    leave the residual / the labels behind, which must change the step.
  }];
  let options = [
    Option<"identity", "identity", "bool", /*default=*/"false",
           "Keep every sample where it is (a baseline)">,
    Option<"predict", "predict", "bool", /*default=*/"true",
           "Price the next block's dispatch too, with its counts predicted "
           "(false: the gather only)">,
    Option<"follow", "follow", "std::string", /*default=*/"\"all\"",
           "all | no-residual | no-labels (tests: break what follows a "
           "sample)">
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
    4. The update per parameter (`#moe.task<OPT, bwd>`): `moe.sgd` (plain
       SGD, constant lr: the default), or with `optimizer=adamw`,
       `momentum`, `weight-decay`, `clip-norm` or `lr-schedule=cosine`,
       `moe.adamw` / `moe.sgd_momentum` with their state as explicit step
       state: new arguments `moe.state = "<param>.<slot>"` after the
       existing ones, the learning rate (and AdamW's update count) as step
       inputs (`moe.step_input`), the schedule in `moe.lr_schedule`.
       `clip-norm` adds `moe.sum_squares` of each group of distributed
       gradients and its all-reduce over the axes holding the group's
       parts (experts: the expert-parallel axes; head or hidden shards:
       also a node's ranks; on the communication stream), the sum of
       squares of the reduced dense gradients and `moe.clip_coef`,
       whose result scales every update. The function returns the loss, the
       updated parameters in argument order, then the new state in argument
       order (docs/optimizers.md).

    The result is in program order forward → backward → all-reduce →
    update; `moe-schedule` reorders it.
  }];
  let options = [
    Option<"learningRate", "lr", "double", /*default=*/"0.01",
           "Learning rate (the schedule's peak)">,
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"sgd\"",
           "sgd | adamw">,
    Option<"momentum", "momentum", "double", /*default=*/"0.0",
           "SGD momentum (torch.optim.SGD, dampening 0)">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.0",
           "Weight decay (AdamW: decoupled; SGD: added to the gradient)">,
    Option<"clipNorm", "clip-norm", "double", /*default=*/"0.0",
           "Clip the global gradient 2-norm to this (0: no clipping)">,
    Option<"lrSchedule", "lr-schedule", "std::string",
           /*default=*/"\"constant\"", "constant | cosine (linear warm-up, "
           "then cosine decay to min-lr)">,
    Option<"warmup", "warmup", "int64_t", /*default=*/"0",
           "Warm-up updates of lr-schedule=cosine">,
    Option<"totalSteps", "total-steps", "int64_t", /*default=*/"0",
           "Update at which lr-schedule=cosine reaches min-lr">,
    Option<"minLr", "min-lr", "double", /*default=*/"0.0",
           "Final learning rate of lr-schedule=cosine">
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def MoeTokenPipeline : Pass<"moe-token-pipeline", "::mlir::ModuleOp"> {
  let summary = "Pipeline each MoE layer of a training step in token chunks "
                "along the capacity slots (FSMoE §4, PipeMoE, Tutel)";
  let description = [{
    In a training step (after `moe-build-train-step`, before
    `moe-schedule`), cuts every MoE layer's dispatch -> expert -> combine
    into `degree` chunks in the forward pass and `degree-bwd` chunks in the
    backward pass (r_fwd and r_bwd; 0: the same as `degree`), each chunk a
    window of the capacity slots of the dispatched E_l x (G·C) x M buffer
    (`moe.dispatch ... slots [first, count]`). Independent of B: any
    degree up to C. The windows of degree r partition [0, C) into r
    windows whose sizes differ by at most one, so the step computes
    exactly what the unchunked one does (the combine is the sum of its
    chunks'). Chunk j is labelled `micro = j`; the backward takes its
    expert inputs from the forward chunks through `moe.slot_window` when
    the windows differ. Token-choice routing with a capacity, or the
    variable-count form (`moe-variable-dropless`): there chunk j of r is a
    run of each expert's rows, `moe.dispatch ... part [j, r]` (sizes from
    the counts at run time), re-cut for the backward by `moe.rows_window`.
  }];
  let options = [
    Option<"degree", "degree", "int64_t", /*default=*/"2",
           "r_fwd: token chunks per MoE layer in the forward pass">,
    Option<"degreeBwd", "degree-bwd", "int64_t", /*default=*/"0",
           "r_bwd: token chunks in the backward pass (0: r_fwd)">,
    Option<"sharedCounts", "shared-counts", "bool", /*default=*/"true",
           "variable-count layers: one counts exchange per layer "
           "(moe.exchange_counts) read by every chunk; false: each chunk "
           "all-gathers its own (for measuring the difference)">
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def MoeFsmoePlan : Pass<"moe-fsmoe-plan", "::mlir::ModuleOp"> {
  let summary = "Choose each MoE layer's token degrees and slice the "
                "gradient all-reduce into its backward windows (FSMoE §4-5)";
  let description = [{
    In a training step (after `moe-build-train-step`, before
    `moe-token-pipeline` and `moe-schedule policy=fsmoe`), prices every MoE
    layer's dispatch, expert and their vjps on `profile` (Eq. 1's alpha and
    work from the cost model) and the backward windows of the step: per
    block l = L-1 .. 0 its MoE layer, then its dense part (attention, norms,
    gate). FSMoE §5 then partitions the replicated gradients (the
    `moe.all_reduce` of every block) over these windows — step 1's greedy
    carry, step 2's differential evolution, never a byte before its
    gradient exists — and Algorithm 1 picks each layer's r_bwd with its
    slice's all-reduce time as t_gar, and r_fwd with none.

    The decisions go into the IR: every forward dispatch gets
    `moe.token_degree = array<i64: r_fwd, r_bwd>` (read by
    `moe-token-pipeline`), and every all-reduce becomes slices
    (`moe.all_reduce ... bytes [offset, size]` or whole tensors), each an
    AR chunk task with `moe.gradient_window` = the task it overlaps (E'^l:
    block l's MoE layer; AT'^l: its dense part; none: after the backward).
    `report` prints the plan (all times simulated).
  }];
  let options = [
    Option<"profile", "profile", "std::string", /*default=*/"\"\"",
           "Hardware profile: a preset name or a JSON file">,
    Option<"report", "report", "std::string", /*default=*/"\"\"",
           "Print the plan here ('-' for stdout; empty: no report)">,
    Option<"evolution", "evolution", "bool", /*default=*/"true",
           "Step 2 (differential evolution); off: step 1's greedy carry"
           " alone">
  ];
}

def MoeSchedule : Pass<"moe-schedule", "::mlir::ModuleOp"> {
  let summary = "Order a training step's tasks on the compute and "
                "communication streams by a scheduling policy";
  let description = [{
    Puts every task of a training step (after `moe-build-train-step`) on the
    compute stream or, for collectives and their vjps, the communication
    stream, and reorders the step into the policy's issue order (a
    priority-driven topological order, so every value is still defined
    before use). Policies:

    | policy | compute / A2A order | all-reduce | extra |
    |---|---|---|---|
    | `vanilla` | vanillaEP, R = 1 | after the backward | the update waits for all communication: no overlap |
    | `pipe-moe` | Tutel / ScheMoE: only D, E, C pipelined | after the backward | D_1 waits for all AT_r (forward); AT'_R waits for D'_1 (backward) |
    | `flowmoe-at` | FlowMoE Eqs. 2–5 (AT pipelined too) | after the backward | |
    | `flowmoe` | FlowMoE Eqs. 2–5 | AR^(l) right after block l's backward A2As (Theorem 1), low priority | |
    | `centralized-ar` | FlowMoE Eqs. 2–5 | after the backward, in the order `flowmoe` issues them | |

    Forward, block by block: compute AT_1..AT_R, E_1..E_R; communication
    D_1..D_R, C_1..C_R. Backward, blocks L..1: compute E_R..E_1,
    AT_R..AT_1; communication C_R..C_1, D_R..D_1. The function records its
    policy in `moe.schedule`.
  }];
  let options = [
    Option<"policy", "policy", "std::string", /*default=*/"\"flowmoe\"",
           "vanilla | pipe-moe | flowmoe-at | flowmoe | centralized-ar">
  ];
}

def MoeChunkGradients : Pass<"moe-chunk-gradients", "::mlir::ModuleOp"> {
  let summary = "Slice each block's gradient all-reduce into S_p-byte chunks "
                "(FlowMoE §3.3)";
  let description = [{
    Replaces every whole-tensor `moe.all_reduce` of a scheduled step (an
    AR^(l) task) by a sequence of chunk tasks of at most `chunk-bytes` bytes
    (S_p), in place and on the same stream. A tensor of at least S_p bytes
    becomes ceil(bytes / S_p) byte-range chunks (`bytes [offset, size]`, the
    last one shorter); smaller tensors are packed whole, in order, into
    chunks of at most S_p bytes. Chunks are labelled
    `#moe.task<AR, bwd, block = l, chunk = i>`. Each chunk consumes the
    gradient it carries, so no chunk can start before that gradient is
    complete (the sync pass makes the wait explicit).
  }];
  let options = [
    Option<"chunkBytes", "chunk-bytes", "std::string", /*default=*/"\"2MiB\"",
           "S_p: bytes per chunk, e.g. 1048576, 512KiB, 2MiB, 4MB">
  ];
}

def MoeInsertSyncs : Pass<"moe-insert-syncs", "::mlir::ModuleOp"> {
  let summary = "Make every cross-stream dependency an explicit event "
                "record/wait, with no redundant wait";
  let description = [{
    For every op of a scheduled step that uses a value produced on another
    stream, inserts `moe.record_event` right after the producer and
    `moe.wait_event` right before the consumer — unless stream order or an
    earlier wait already guarantees the producer has completed (tracked with
    vector clocks, so transitive chains count). When a consumer needs
    several producers of one stream, it waits only for the last of them.
  }];
}

def MoeRoutingStats : Pass<"moe-routing-stats", "::mlir::ModuleOp"> {
  let summary = "Gather every forward dispatch's per-sample expert counts "
                "on every rank (routing statistics)";
  let description = [{
    In every scheduled step (a function with `moe.schedule`), inserts a
    `moe.routing_counts` of the routing indices right after each forward
    token-choice `moe.dispatch`, on the dispatch's stream and task: the
    indices are ready there (the dispatch waited for them) and the
    dispatch's all-to-all is not delayed. Every rank then holds the
    (G·B) x E counts of each block and micro-batch, which the runtime hands
    to the step's routing log (moe-run --routing-trace, the balance line;
    docs/load-aware.md §1). Runs at the end of `moe-flowmoe-pipeline` with
    `routing-stats=1`; running it twice adds nothing.
  }];
}

def MoeExpertPlacement : Pass<"moe-expert-placement", "::mlir::ModuleOp"> {
  let summary = "Make the expert placement a step input of the variable-count "
                "dispatches and combines";
  let description = [{
    Placement as a run-time value (docs/load-aware.md §2). In every
    scheduled step (a function with `moe.schedule`), adds one step input
    per MoE block L (the block of its ops' `moe.task`),
    `expert_slots.L : G x S` (`moe.step_input = "expert_slots.L"`, S = E/G:
    slot s of rank g holds logical expert `expert_slots.L[g][s]`), and
    passes it to that block's variable-count `moe.dispatch` and
    `moe.combine`, forward and in the vjps (one more primal of each vjp,
    bound to its body op's operand). Each block has its own table, so a
    planner can move the experts of one layer only. The host writes them
    before each step: `moe-run --expert-placement [BLOCK=]RANKS` (and
    `--expert-placement-at`), or `moe_step_set_expert_slots` in generated
    code; the expert weights and their optimizer state then live in that
    layout. Refuses a step without variable-count routing, an op without a
    block, ops of one block whose groups or expert counts differ, and
    expert-sharded weights (`esp=1`). Runs at the end of
    `moe-flowmoe-pipeline` with `expert-placement=1`.
  }];
}

def MoeVerifySchedule : Pass<"moe-verify-schedule", "::mlir::ModuleOp"> {
  let summary = "Reject a schedule that breaks a dependency, can hang, or "
                "orders collectives differently across ranks";
  let description = [{
    Checks every scheduled step (a function with `moe.schedule`):
    every task is on a stream; every value used on one stream and produced
    on another is waited for (an event recorded after the producer, waited
    before the consumer, directly or through a chain); every wait refers to
    an event recorded earlier in the step (else the stream could wait
    forever); and any two collectives on the same group and communicator
    class are ordered by stream order or events — otherwise ranks may issue
    them in different orders and deadlock. Each error names both ops.
  }];
}

def MoePrintSchedule : Pass<"moe-print-schedule", "::mlir::ModuleOp"> {
  let summary = "Print the task order of each stream of a scheduled step";
  let description = [{
    Prints, per phase and stream, the sequence of tasks in issue order using
    FlowMoE's names (AT_r^l, D_r^l, E_r^l, C_r^l, AR^l; a prime marks the
    backward task), with consecutive ops of one task collapsed. Used by the
    tests to compare against FlowMoE Fig. 2.
  }];
  let options = [
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "Where to write ('-' for stdout)">
  ];
}

def MoeSimulate : Pass<"moe-simulate", "::mlir::ModuleOp"> {
  let summary = "Predict the iteration time of a scheduled step on a "
                "hardware profile";
  let description = [{
    Simulates every scheduled step (a function with `moe.schedule`) with the
    runtime's semantics on task durations from the cost model and the
    hardware profile (a preset name or a JSON file, docs/profile-format.md):
    one compute stream, communication stream(s) whose all-reduce chunks form
    a low-priority pool issued only when no other communication task is
    ready (FlowMoE Alg. 2), non-preemptive tasks, event waits. Prints the
    iteration time, busy time per resource (compute, inter- and intra-node
    links), overlap, exposed communication, the lower bound (the busiest
    stream's busy time) and the peak
    memory of gradients computed but not yet all-reduced. All figures are
    simulated and say so. `trace` (or the global `--moe-trace=FILE`)
    writes a Chrome-trace / Perfetto timeline with one track per stream per
    rank. With `routing-trace=FILE` (a routing trace,
    docs/routing-trace-format.md) the dispatch, combine and expert tasks of
    (block l, micro-batch r) follow the trace's record (step s, r, l) of
    step `routing-step` (default: the trace's first) instead of uniform
    routing: each rank's intra- and inter-node token rows through the
    per-link alpha-beta, the slowest rank ending the exchange, the busiest
    rank's experts gating the combine (docs/load-aware.md §6). A trace that
    does not match the step is an error naming both. The IR is not changed.
  }];
  let options = [
    Option<"profile", "profile", "std::string", /*default=*/"\"\"",
           "Hardware profile: a preset name or a JSON file">,
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "Where to write the summary ('-' for stdout)">,
    Option<"json", "json", "bool", /*default=*/"false",
           "Write the summary as JSON">,
    Option<"trace", "trace", "std::string", /*default=*/"\"\"",
           "Write a Chrome-trace JSON timeline to this file">,
    Option<"routingTrace", "routing-trace", "std::string",
           /*default=*/"\"\"",
           "Price dispatch, combine and experts from this routing trace">,
    Option<"routingStep", "routing-step", "int64_t", /*default=*/"-1",
           "The routing trace's step to use (-1: its first)">
  ];
}

def MoeAutotune : Pass<"moe-autotune", "::mlir::ModuleOp"> {
  let summary = "Choose the all-reduce chunk size S_p by Bayesian "
                "optimisation against the simulator (FlowMoE §4.1)";
  let description = [{
    For every scheduled step that is not chunked yet, searches S_p over
    (0, largest per-block all-reduce payload] with `samples` evaluations:
    each sample chunks a copy of the step (moe-chunk-gradients), inserts its
    syncs (moe-insert-syncs) and simulates it on `profile` (moe-simulate).
    Then it chunks the step itself with the best S_p and inserts its syncs.
    `method` is `bo` (Gaussian process, Matern 5/2, Expected Improvement
    with xi = 0.1: App. D), `grid` or `random`, for comparison. The tuner is
    the runtime's (runtime/include/moe_rt/sp_tuner.h), which trainers feed
    with measured times instead. Prints every sample and the choice; all
    times are simulated.
  }];
  let options = [
    Option<"profile", "profile", "std::string", /*default=*/"\"\"",
           "Hardware profile: a preset name or a JSON file">,
    Option<"method", "method", "std::string", /*default=*/"\"bo\"",
           "bo | grid | random">,
    Option<"samples", "samples", "int64_t", /*default=*/"8",
           "Evaluations of the simulator">,
    Option<"seed", "seed", "uint64_t", /*default=*/"1",
           "Seed of the random initial samples">,
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "Where to write the report ('-' for stdout)">
  ];
}

#endif // MOE_TRANSFORMS_PASSES_TD
