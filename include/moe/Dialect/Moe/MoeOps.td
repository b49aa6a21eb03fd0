//===- MoeOps.td - moe dialect operations ------------------*- tablegen -*-===//
//
// Shapes use FlowMoE's notation: B samples per rank, N tokens per sample,
// M embedding, H expert hidden size, E experts in total, E_l = E / G local
// experts on each of the G ranks of the expert-parallel group, k experts per
// token, C = ceil(f * k * B * N / E) capacity per expert per rank.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_OPS_TD
#define MOE_OPS_TD

include "MoeDialect.td"
include "MoeAttrs.td"
include "MoeTypes.td"
include "MoeInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def Moe_FloatTensor : RankedTensorOf<[AnyFloat]>;
def Moe_IndexTensor : RankedTensorOf<[I32, I64]>;

class Moe_ComputeOp<string mnemonic, list<Trait> traits = []> :
    Moe_Op<mnemonic, !listconcat(traits, [Pure, Moe_TaskOpInterface])>;

// Collectives are not Pure: two ranks must issue them in the same order, so
// they must not be CSE'd, hoisted or dropped even when their result is dead.
class Moe_CollectiveOp<string mnemonic, list<Trait> traits = []> :
    Moe_Op<mnemonic, !listconcat(traits, [
      DeclareOpInterfaceMethods<Moe_TaskOpInterface, ["isCommunication"]>,
      Moe_CollectiveOpInterface,
      DeclareOpInterfaceMethods<SymbolUserOpInterface>])> {
  dag groupArgs = (ins FlatSymbolRefAttr:$grid, DenseI16ArrayAttr:$axes);
}

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

def Moe_BlockOp : Moe_Op<"block", [
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects]> {
  let summary = "one transformer block (MHA + gate, then the MoE layer)";
  let description = [{
    Groups the ops of transformer block `index` (0-based, in model order).
    The region's arguments are bound to the operands; `moe.yield` returns the
    block's results. Weights are captured from the enclosing function, so a
    block reads like the model code it came from.

    ```mlir
    %h1 = moe.block 0 (%a = %h0 : tensor<4x64x128xf32>) -> tensor<4x64x128xf32> {
      ...
      moe.yield %out : tensor<4x64x128xf32>
    }
    ```

    The scheduling passes use `index` as FlowMoE's block index l.
  }];
  let arguments = (ins
    ConfinedAttr<I64Attr, [IntNonNegative]>:$index,
    Variadic<AnyType>:$inputs);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    OpBuilder<(ins "int64_t":$index, "::mlir::ValueRange":$inputs,
                   "::mlir::TypeRange":$resultTypes)>
  ];
}

def Moe_YieldOp : Moe_Op<"yield", [
    Pure, Terminator, ParentOneOf<["BlockOp", "VjpOp"]>]> {
  let summary = "returns the results of a `moe.block` or `moe.vjp` body";
  let arguments = (ins Variadic<AnyType>:$operands);
  let builders = [OpBuilder<(ins), [{ /* nothing to yield */ }]>];
  let assemblyFormat = "attr-dict ($operands^ `:` type($operands))?";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Dense layers
//===----------------------------------------------------------------------===//

def Moe_EmbeddingOp : Moe_ComputeOp<"embedding"> {
  let summary = "token embedding lookup";
  let description = [{
    `result[b, n, :] = table[ids[b, n], :]` with `ids : B x N` integers and
    `table : V x M`.
  }];
  let arguments = (ins Moe_IndexTensor:$ids, Moe_FloatTensor:$table);
  let results = (outs Moe_FloatTensor:$result);
  let assemblyFormat = [{
    $ids `,` $table attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Moe_PositionEmbeddingOp : Moe_ComputeOp<"position_embedding"> {
  let summary = "learned absolute position embeddings added to the stream";
  let description = [{
    GPT-2's / BERT's `wpe`: `result[b, n, :] = input[b, n, :] + table[n, :]`
    with `input : B x N x M` and `table : P x M`, `P >= N` positions (rows
    past N are not read). Positions are the token's index in its sequence,
    0-based, the same in every sample.

    ```mlir
    %h = moe.position_embedding %x, %wpe
           : (tensor<4x64x128xf32>, tensor<1024x128xf32>) -> tensor<4x64x128xf32>
    ```
  }];
  let arguments = (ins Moe_FloatTensor:$input, Moe_FloatTensor:$table);
  let results = (outs Moe_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $table attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Moe_NormOp : Moe_ComputeOp<"norm"> {
  let summary = "LayerNorm or RMSNorm over the last dimension";
  let description = [{
    `layer`: `(x - mean) / sqrt(var + eps) * scale + bias`;
    `rms`: `x / sqrt(mean(x^2) + eps) * scale`. `scale` (and `bias`, layer
    norm only, optional) have the size of the last dimension.
  }];
  let arguments = (ins
    Moe_FloatTensor:$input,
    Moe_FloatTensor:$scale,
    Optional<Moe_FloatTensor>:$bias,
    Moe_NormKindAttr:$kind,
    DefaultValuedAttr<F64Attr, "1e-5">:$epsilon);
  let results = (outs Moe_FloatTensor:$result);
  let assemblyFormat = [{
    `` $kind $input `,` $scale (`,` $bias^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Moe_LinearOp : Moe_ComputeOp<"linear"> {
  let summary = "dense layer over the last dimension (e.g. the LM head)";
  let description = [{
    `result = input · weight (+ bias)` with `weight : K x N`, contracting the
    last dimension of `input` (size K).
  }];
  let arguments = (ins
    Moe_FloatTensor:$input,
    Moe_FloatTensor:$weight,
    Optional<Moe_FloatTensor>:$bias);
  let results = (outs Moe_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`bias` `(` $bias^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Moe_BiasAddOp : Moe_ComputeOp<"bias_add"> {
  let summary = "a bias added along the last dimension";
  let description = [{
    `result[..., j] = input[..., j] + bias[j]` with `bias` of the size of
    the last dimension. moe-tensor-parallel moves a tensor-parallel
    attention's `out_bias` here, after the reduce-scatter that sums the
    ranks' partial outputs, so the bias is added once (Megatron's
    row-parallel bias).

    ```mlir
    %y = moe.bias_add %x, %bo
           : (tensor<4x64x128xf32>, tensor<128xf32>) -> tensor<4x64x128xf32>
    ```
  }];
  let arguments = (ins Moe_FloatTensor:$input, Moe_FloatTensor:$bias);
  let results = (outs Moe_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $bias attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Moe_CrossEntropyOp : Moe_ComputeOp<"cross_entropy"> {
  let summary = "mean token-level cross-entropy of logits against labels";
  let description = [{
    `logits : B x N x V`, `labels : B x N` integers; the result is the mean
    over the B x N tokens of `-log softmax(logits)[label]`, a 0-d tensor.
  }];
  let arguments = (ins Moe_FloatTensor:$logits, Moe_IndexTensor:$labels);
  let results = (outs 0DTensorOf<[AnyFloat]>:$loss);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

def Moe_AttentionOp : Moe_ComputeOp<"attention", [AttrSizedOperandSegments]> {
  let summary = "multi-head or grouped-query self-attention";
  let description = [{
    Self-attention over `input : B x N x M` with `num_heads` query heads and
    `num_kv_heads` key/value heads (grouped-query attention when fewer;
    `num_heads` must be a multiple), each of size `head_dim`. Weights:
    `wq : M x (heads·D)`, `wk, wv : M x (kv_heads·D)`, `wo : (heads·D) x M`.
    `causal` masks future tokens; `rotary` applies rotary position
    embeddings to Q and K: lane pair (p, q) of a head at position n turns
    by the angle n·theta^(-2j/D) for pair j, with `layout = rotate_half`
    (the default: p = j, q = j + D/2; GPT-NeoX, HF LLaMA/Mixtral/Qwen2) or
    `layout = interleaved` (p = 2j, q = 2j + 1; GPT-J, Meta's LLaMA), and
    base `theta` (default 10000; HF Mixtral's rope_theta is 1e6). An
    optional pre-norm (`prenorm layer(%scale, %bias)` or
    `prenorm rms(%scale)`) is applied to the input first. Optional biases
    (`qkv_bias(%bq, %bk, %bv)`: Qwen2, nn.MultiheadAttention;
    `out_bias(%bo)`) are added to the Q, K, V projections (before rotary)
    and to the output projection. `clip_qkv = c` (DBRX's clip_qkv) clamps
    the Q, K and V projections, biases included, to [-c, c] before rotary;
    its gradient is zero where a projection lies outside the range
    (torch.clamp's). The residual add is not part of the op.

    ```mlir
    %a = moe.attention %x weights(%wq, %wk, %wv, %wo) heads = 8 kv_heads = 2
           head_dim = 16 causal rotary theta = 1.000000e+06
           prenorm rms(%g)
           : (tensor<4x64x128xf32>, tensor<128x128xf32>, tensor<128x32xf32>,
              tensor<128x32xf32>, tensor<128x128xf32>, tensor<128xf32>)
           -> tensor<4x64x128xf32>
    ```
  }];
  let arguments = (ins
    Moe_FloatTensor:$input,
    Moe_FloatTensor:$wq,
    Moe_FloatTensor:$wk,
    Moe_FloatTensor:$wv,
    Moe_FloatTensor:$wo,
    Variadic<Moe_FloatTensor>:$norm_params,
    Variadic<Moe_FloatTensor>:$qkv_bias,
    Optional<Moe_FloatTensor>:$out_bias,
    ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
    ConfinedAttr<I64Attr, [IntPositive]>:$num_kv_heads,
    ConfinedAttr<I64Attr, [IntPositive]>:$head_dim,
    UnitAttr:$causal,
    UnitAttr:$rotary,
    OptionalAttr<Moe_RotaryLayoutAttr>:$layout,
    OptionalAttr<F64Attr>:$theta,
    OptionalAttr<Moe_NormKindAttr>:$norm,
    DefaultValuedAttr<F64Attr, "1e-5">:$epsilon,
    OptionalAttr<F64Attr>:$clip_qkv);
  let results = (outs Moe_FloatTensor:$result);
  let assemblyFormat = [{
    $input `weights` `(` $wq `,` $wk `,` $wv `,` $wo `)`
    `heads` `=` $num_heads `kv_heads` `=` $num_kv_heads `head_dim` `=` $head_dim
    (`causal` $causal^)? (`rotary` $rotary^)?
    (`layout` `=` `` $layout^)? (`theta` `=` $theta^)?
    (`clip_qkv` `=` $clip_qkv^)?
    (`prenorm` `` $norm^ `(` $norm_params `)`)?
    (`qkv_bias` `(` $qkv_bias^ `)`)? (`out_bias` `(` $out_bias^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// The rotary base: `theta`, else 10000 (GPT-NeoX, LLaMA).
    double getRotaryTheta() {
      return getTheta() ? getTheta()->convertToDouble() : 10000.0;
    }
    /// The Q/K/V clamp bound: `clip_qkv`, else 0 (no clamp).
    double getClipBound() {
      return getClipQkv() ? getClipQkv()->convertToDouble() : 0.0;
    }
    /// The rotary lane pairing: `layout`, else rotate-half.
    ::mlir::moe::RotaryLayout getRotaryLayout() {
      return getLayout().value_or(::mlir::moe::RotaryLayout::rotate_half);
    }
    /// Q, K, V biases (null when the op has none).
    ::mlir::Value getBq() { return qkvBias(0); }
    ::mlir::Value getBk() { return qkvBias(1); }
    ::mlir::Value getBv() { return qkvBias(2); }
    ::mlir::Value qkvBias(unsigned i) {
      return getQkvBias().size() == 3 ? getQkvBias()[i] : ::mlir::Value();
    }
    ::llvm::LogicalResult verifyRotary();
    ::llvm::LogicalResult verifyBiases();
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

def Moe_GateOp : Moe_ComputeOp<"gate"> {
  let summary = "router: scores tokens against experts and picks top-k";
  let description = [{
    Scores `input : B x N x M` against `num_experts` experts with
    `weight : M x E` and routes each token to `top_k` experts.

    | kind | scores (FSMoE §2.1) | extra operand |
    |---|---|---|
    | `softmax_topk` | softmax(x·W) over all E, keep the k most probable (GShard/Switch); `normalize` renormalises them to sum to 1 (= softmax over the kept logits, Mixtral) | — |
    | `noisy_topk` | GShard: x·W + N(0,1)·softplus(x·W_noise) before top-k | `W_noise : M x E` |
    | `sigmoid` | σ(x·W) scales the expert output (BASE/StableMoE) | — |
    | `cosine` | X-MoE: cos(W_proj·x, W) / τ, W : d x E | `W_proj : M x d` |
    | `expert_choice` | each expert picks its top-C tokens | — |

    Results: `indices` and `weights` (B x N x k for token choice; E x C for
    expert choice, token ids flattened over B x N) and `counts : E`, tokens
    routed to each expert before capacity is applied.

    With `capacity_factor = f`, `capacity` must be C = ceil(f·k·B·N/E)
    (FlowMoE §2.2); with neither, routing is dropless. Expert choice always
    needs a capacity. When an expert overflows, slots go in GShard order:
    every token's first choice before any second choice, tokens in order
    (runtime/src/kernels/Routing.h).

    `tau` (cosine only, > 0) is the cosine temperature τ; without it τ =
    0.07 (X-MoE's initial value). `sample_offset` (noisy_topk only, >= 0)
    is the index, in the step's whole batch, of the input's first sample:
    `moe-microbatch` sets it to r·B/R on micro-batch r, so that each
    token's noise — drawn from (the step's seed, its sample, its position,
    the expert) — does not depend on how the batch is split. Without it, 0.
  }];
  let arguments = (ins
    Moe_FloatTensor:$input,
    Moe_FloatTensor:$weight,
    Optional<Moe_FloatTensor>:$aux_weight,
    Moe_GateKindAttr:$kind,
    ConfinedAttr<I64Attr, [IntPositive]>:$num_experts,
    ConfinedAttr<I64Attr, [IntPositive]>:$top_k,
    OptionalAttr<F64Attr>:$capacity_factor,
    OptionalAttr<I64Attr>:$capacity,
    UnitAttr:$normalize,
    OptionalAttr<F64Attr>:$tau,
    OptionalAttr<I64Attr>:$sample_offset);
  let results = (outs
    Moe_IndexTensor:$indices,
    Moe_FloatTensor:$weights,
    Moe_IndexTensor:$counts);
  let assemblyFormat = [{
    `` $kind $input `,` $weight (`aux` `(` $aux_weight^ `)`)?
    `experts` `=` $num_experts `top_k` `=` $top_k
    custom<CapacityFactor>($capacity_factor) (`capacity` `=` $capacity^)?
    (`normalize` $normalize^)? (`tau` `=` $tau^)?
    (`sample_offset` `=` $sample_offset^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    bool isExpertChoice() { return getKind() == GateKind::expert_choice; }
    bool isDropless() { return !getCapacity().has_value(); }
    /// cosine's temperature: `tau`, or X-MoE's 0.07 without it (the
    /// runtime's MOE_RT_GATE_COSINE_TAU).
    double getTauOrDefault() {
      std::optional<llvm::APFloat> t = getTau();
      return t ? t->convertToDouble() : 0.07;
    }
    /// noisy_topk: the batch index of the input's first sample.
    int64_t getSampleOffsetOrZero() { return getSampleOffset().value_or(0); }
  }];
}

def Moe_DispatchOp : Moe_CollectiveOp<"dispatch", [AttrSizedOperandSegments]> {
  let summary = "all-to-all that sends each token to its experts' ranks";
  let description = [{
    Each rank lays out its `input : B x N x M` tokens expert-major by
    `indices` (at most `capacity` per expert; later tokens are dropped, as in
    Switch/GShard), then an all-to-all over the expert-parallel group (the
    ranks spanned by `axes` of `grid`, G of them) delivers to every rank the
    slots of its E_l = E/G local experts from all G ranks, source-rank-major:
    the result is `E_l x (G·C) x M`. Dropless dispatch (no `capacity`) has a
    dynamic second dimension and exchanges `counts` first.

    Variable-count (dropless) dispatch, as `moe-variable-dropless` makes
    it: `bound = R` and a second result `rows : E_l x G` (integers). Only
    routed tokens travel (an all-to-all-v after a counts exchange); the
    result is `E_l x R x M`, local expert l's rows packed from row 0, from
    source rank 0, 1, ... in turn — `rows[l][g]` of them from rank g — then
    zeros. R bounds the rows any local expert may receive; a step whose
    routing exceeds it fails on every rank with an error naming the block,
    the expert and the load (docs/variable-dropless.md).

    `moe.combine` is its adjoint; the training-step pass uses each as the
    other's backward.

    `expert_slots(%t)` (variable-count only) makes the expert placement a
    run-time value: `t : G x S` is the slot table, `t[g][s]` the logical
    expert that slot s of rank g holds, and the result's first dimension
    is S (slots, not E/G consecutive experts). Today every expert has
    exactly one slot (G·S = E, a permutation of the experts); replicas
    (an expert in several slots, G·S > E) will add a per-expert share
    operand without changing this one. Without it, rank g holds experts
    g·E_l ... (g+1)·E_l - 1 in order (the table g·S + s). The runtime
    refuses a table that is not a permutation of the experts, naming the
    block and the entry (docs/load-aware.md §2).

    `slots [first, count]` (token-level pipelining, `moe-token-pipeline`)
    moves only the capacity slots [first, first + count) of every expert:
    the result is `E_l x (G·count) x M`. Slots are still assigned with the
    whole capacity, so the dispatches of a partition of [0, capacity)
    together move exactly the tokens of the whole dispatch. Token choice
    only.

    `part [j, r]` (token-level pipelining of the variable-count form,
    `moe-token-pipeline` on dropless models) moves only token chunk j of r:
    of the c rows a rank sends one expert (GShard order), the run
    [⌊j·c/r⌋, ⌊(j+1)·c/r⌋). The sizes follow from the counts at run time;
    `rows` is the chunk's. The r chunks together move every routed row
    exactly once. Variable-count only, 0 <= j < r.

    `all_counts(%n)` (variable-count only; a `moe.exchange_counts` of this
    dispatch's indices): every rank's per-expert row counts, exchanged once
    for the layer. The dispatch and its vjp read the sizes of its exchange
    from them instead of all-gathering the counts again, so the r chunks of
    a layer, forward and backward, share one counts exchange. The runtime
    checks this rank's row against its own routing, naming the block.
  }];
  let arguments = !con((ins
    Moe_FloatTensor:$input,
    Moe_IndexTensor:$indices,
    Moe_IndexTensor:$counts,
    Optional<Moe_IndexTensor>:$expert_slots,
    Optional<Moe_IndexTensor>:$all_counts),
    groupArgs, (ins
    ConfinedAttr<I64Attr, [IntPositive]>:$num_experts,
    OptionalAttr<I64Attr>:$capacity,
    OptionalAttr<DenseI64ArrayAttr>:$slots,
    OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$bound,
    OptionalAttr<DenseI64ArrayAttr>:$part));
  let results = (outs Moe_FloatTensor:$result,
                      Optional<Moe_IndexTensor>:$rows);
  let assemblyFormat = [{
    $input `,` $indices `,` $counts
    (`expert_slots` `(` $expert_slots^ `)`)?
    (`all_counts` `(` $all_counts^ `)`)? `on` $grid `axes` `=` $axes
    `experts` `=` $num_experts (`capacity` `=` $capacity^)?
    (`slots` $slots^)? (`bound` `=` $bound^)? (`part` $part^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let builders = [
    // The whole capacity (no `slots`), padded: how the frontend builds it.
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$input,
                   "::mlir::Value":$indices, "::mlir::Value":$counts,
                   "::mlir::FlatSymbolRefAttr":$grid,
                   "::mlir::DenseI16ArrayAttr":$axes,
                   "::mlir::IntegerAttr":$num_experts,
                   "::mlir::IntegerAttr":$capacity), [{
      build($_builder, $_state, result, ::mlir::Type(), input, indices,
            counts, ::mlir::Value(), ::mlir::Value(), grid, axes,
            num_experts, capacity,
            ::mlir::DenseI64ArrayAttr(), ::mlir::IntegerAttr(),
            ::mlir::DenseI64ArrayAttr());
    }]>
  ];
  let extraClassDeclaration = [{
    /// Variable-count dropless: only routed tokens travel (bound + rows).
    bool isVariable() { return static_cast<bool>(getRows()); }
  }];
}

def Moe_ExpertOp : Moe_ComputeOp<"expert", [AttrSizedOperandSegments]> {
  let summary = "grouped FFN over the rank's local experts";
  let description = [{
    For each local expert e of `input : E_l x T x M`:
    `act(x·up[e]) · down[e]`, or, when `gate(%w)` is given (SwiGLU and
    friends), `(act(x·w[e]) ⊙ (x·up[e])) · down[e]`.
    `up, gate : E_l x M x H`, `down : E_l x H x M`.

    With `rows(%r)` (a variable-count dispatch's `rows : E_l x G`), expert
    l computes only its first sum_g r[l][g] rows — a grouped GEMM over
    per-expert counts — and the other rows of the result are zero.
  }];
  let arguments = (ins
    Moe_FloatTensor:$input,
    Moe_FloatTensor:$up,
    Optional<Moe_FloatTensor>:$gate_proj,
    Moe_FloatTensor:$down,
    Optional<Moe_IndexTensor>:$rows,
    Moe_ActivationAttr:$activation);
  let results = (outs Moe_FloatTensor:$result);
  let assemblyFormat = [{
    `` $activation $input `up` `(` $up `)` (`gate` `(` $gate_proj^ `)`)?
    `down` `(` $down `)` (`rows` `(` $rows^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    bool isGated() { return static_cast<bool>(getGateProj()); }
    int64_t getHiddenSize() {
      return ::llvm::cast<::mlir::RankedTensorType>(getUp().getType())
          .getDimSize(2);
    }
  }];
}

def Moe_SharedExpertOp : Moe_ComputeOp<"shared_expert"> {
  let summary = "dense FFN applied to every token (DeepSeek shared experts)";
  let description = [{
    The same FFN as `moe.expert` but on the tokens themselves
    (`input : B x N x M`) with 2-D weights `up, gate : M x H_s`,
    `down : H_s x M`; S shared experts are one FFN of hidden size S·H.
    Its output is added to the routed experts' combined output.
  }];
  let arguments = (ins
    Moe_FloatTensor:$input,
    Moe_FloatTensor:$up,
    Optional<Moe_FloatTensor>:$gate_proj,
    Moe_FloatTensor:$down,
    Moe_ActivationAttr:$activation);
  let results = (outs Moe_FloatTensor:$result);
  let assemblyFormat = [{
    `` $activation $input `up` `(` $up `)` (`gate` `(` $gate_proj^ `)`)?
    `down` `(` $down `)` attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Moe_SigmoidGateOp : Moe_ComputeOp<"sigmoid_gate"> {
  let summary = "scales each token's value by sigmoid(x·w) (Qwen2-MoE)";
  let description = [{
    `result[t] = sigmoid(input[t] · weight) * value[t]` for every token t of
    `input, value : B x N x M`, with `weight : M x 1`: Qwen2-MoE's
    shared-expert gate (`sigmoid(shared_expert_gate(x)) *
    shared_expert(x)`), where `input` is the tokens the shared expert reads
    and `value` its output.

    ```mlir
    %g = moe.sigmoid_gate %x, %wg scales %shared
           : (tensor<2x16x64xf32>, tensor<64x1xf32>, tensor<2x16x64xf32>)
           -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins
    Moe_FloatTensor:$input,
    Moe_FloatTensor:$weight,
    Moe_FloatTensor:$value);
  let results = (outs Moe_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `scales` $value attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Moe_CombineOp : Moe_CollectiveOp<"combine", [AttrSizedOperandSegments]> {
  let summary = "all-to-all back to the tokens' ranks, weighted sum over k";
  let description = [{
    The adjoint of `moe.dispatch`: sends every expert output slot
    (`input : E_l x (G·C) x M`) back to its token's rank, restores token
    order and sums the k expert outputs of each token scaled by the routing
    `weights`. Dropped tokens get zero. The result is `B x N x M` with B, N
    those of `indices`.

    With `slots [first, count]` the input holds only those capacity slots
    (`E_l x (G·count) x M`, a `moe.dispatch ... slots` chunk's) and the
    result is their contribution: summed over a partition of the slots,
    the whole combine.

    With `rows(%r)` (the variable-count dispatch's `rows`), the input is
    that dispatch's `E_l x R x M` layout and only its filled rows travel
    back (all-to-all-v).

    `to(%place)` (variable-count only; NetMoE, docs/netmoe-in-the-step.md)
    makes the placement a run-time value: `place : (G·B)` gives each sample
    s = g·B + b (sample b of group rank g) its new rank, B samples per
    rank, and every expert output row goes straight there — no send-back.
    The result holds this rank's new samples in increasing s. The identity
    placement gives the plain combine bit for bit. `residual(%h)`, with `to`,
    is NetMoE App. A's residual inlining: `%h` is the dispatch's result
    (the dispatch then sends the residual stream itself) and every token's
    first choice carries its row to the new rank, added unweighted: the
    result is h + sum_k w_k y_k. The vjp reuses the placement.

    `expert_slots(%t)` (variable-count only): the expert placement, the
    same slot table as the dispatch's (`moe.dispatch`); it composes with
    `to(%place)`.
  }];
  let arguments = !con((ins
    Moe_FloatTensor:$input,
    Moe_IndexTensor:$indices,
    Moe_FloatTensor:$weights,
    Moe_IndexTensor:$counts,
    Optional<Moe_IndexTensor>:$rows,
    Optional<Moe_FloatTensor>:$residual,
    Optional<Moe_IndexTensor>:$placement,
    Optional<Moe_IndexTensor>:$expert_slots),
    groupArgs, (ins
    ConfinedAttr<I64Attr, [IntPositive]>:$num_experts,
    OptionalAttr<I64Attr>:$capacity,
    OptionalAttr<DenseI64ArrayAttr>:$slots,
    OptionalAttr<DenseI64ArrayAttr>:$part));
  let results = (outs Moe_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $indices `,` $weights `,` $counts (`rows` `(` $rows^ `)`)?
    (`residual` `(` $residual^ `)`)? (`to` `(` $placement^ `)`)?
    (`expert_slots` `(` $expert_slots^ `)`)? `on` $grid `axes` `=` $axes
    `experts` `=` $num_experts (`capacity` `=` $capacity^)?
    (`slots` $slots^)? (`part` $part^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let builders = [
    // The whole capacity (no `slots`): how the frontend builds it.
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$input,
                   "::mlir::Value":$indices, "::mlir::Value":$weights,
                   "::mlir::Value":$counts,
                   "::mlir::FlatSymbolRefAttr":$grid,
                   "::mlir::DenseI16ArrayAttr":$axes,
                   "::mlir::IntegerAttr":$num_experts,
                   "::mlir::IntegerAttr":$capacity), [{
      build($_builder, $_state, result, input, indices, weights, counts,
            ::mlir::Value(), ::mlir::Value(), ::mlir::Value(),
            ::mlir::Value(), grid, axes,
            num_experts, capacity, ::mlir::DenseI64ArrayAttr(),
            ::mlir::DenseI64ArrayAttr());
    }]>
  ];
}

def Moe_RoutingCountsOp : Moe_CollectiveOp<"routing_counts"> {
  let summary = "per-sample expert counts of the whole batch, on every rank";
  let description = [{
    Routing statistics (docs/load-aware.md §1): counts this rank's
    token-choice `indices : B x N x k` per sample and expert (NetMoE Eq. 2's
    num, before capacity), then all-gathers them over the group (`axes` of
    `grid`, G ranks), so every rank holds the `(G·B) x E` matrix: row
    j·B + b is sample b of group rank j. The runtime hands each result to
    the step's routing log (routing traces, the balance line); planners
    read it as a value. `moe-routing-stats` inserts one after every forward
    token-choice dispatch.

    ```mlir
    %n = moe.routing_counts %idx on @cluster axes = [0, 1] experts = 8
           : (tensor<2x64x2xi32>) -> tensor<8x8xi32>
    ```
  }];
  let arguments = !con((ins Moe_IndexTensor:$indices), groupArgs,
    (ins ConfinedAttr<I64Attr, [IntPositive]>:$num_experts));
  let results = (outs Moe_IndexTensor:$result);
  let assemblyFormat = [{
    $indices `on` $grid `axes` `=` $axes `experts` `=` $num_experts
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The group as the routing trace's grid: nodes (grid axis 0, when the
    /// group spans it) x ranks per node (the product of its other axes).
    std::pair<int64_t, int64_t> getNodeGrid();
  }];
}

def Moe_ExchangeCountsOp : Moe_CollectiveOp<"exchange_counts"> {
  let summary = "every rank's per-expert row counts of one layer, exchanged once";
  let description = [{
    The counts exchange of a variable-count layer, made explicit so that
    the layer's token chunks share it (FSMoE's token-level pipelining,
    docs/variable-dropless.md §"One counts exchange per layer"): counts
    this rank's token-choice `indices : B x N x k` per expert (the rows it
    sends each expert, before any expert placement) and all-gathers them
    over the group (`axes` of `grid`, G ranks): the result `G x E` holds in
    row g the counts of group rank g. `moe-token-pipeline` inserts one per
    chunked layer and hands it to every `moe.dispatch ... part [j, r]` of
    the layer (`all_counts(%n)`), whose forward calls and vjps then move
    rows without exchanging counts: one all-gather of E integers per layer
    instead of r_fwd + r_bwd.

    ```mlir
    %n = moe.exchange_counts %idx on @cluster axes = [0, 1] experts = 8
           : (tensor<4x16x2xi32>) -> tensor<4x8xi32>
    ```
  }];
  let arguments = !con((ins Moe_IndexTensor:$indices), groupArgs,
    (ins ConfinedAttr<I64Attr, [IntPositive]>:$num_experts));
  let results = (outs Moe_IndexTensor:$result);
  let assemblyFormat = [{
    $indices `on` $grid `axes` `=` $axes `experts` `=` $num_experts
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Moe_PlanPlacementOp : Moe_CollectiveOp<"plan_placement",
                                           [Moe_HostPlanner]> {
  let summary = "NetMoE's sample placement, solved from the routing counts";
  let description = [{
    NetMoE's two-stage solve (seeds/002 §3.2, `moe_rt/sample_placement.h`):
    from `counts : (G·B) x E` (a `moe.routing_counts`, the same on every
    rank), each sample's new rank, `(G·B)` integers with B samples per
    rank, minimising first the inter-node, then the intra-node tokens of
    the combine that the placement drives (experts where expert
    parallelism puts them, E/G per rank in order). Every rank solves the
    same problem and gets the same answer: no broadcast. A host planner:
    scheduled, it runs on `#moe.stream<host>` (a host thread), started by
    an event after its counts and joined by an event before the first op
    that reads the placement (docs/host-planners.md); it moves no data, the
    group only gives the problem's shape, read as nodes (grid axis 0, when
    the group spans it) x ranks per node.
    `identity` keeps every sample where it is (tests; a baseline).
    Unless `gather_only`, the objective also prices the next MoE block's
    dispatch from the new ranks (Eq. 10), with that block's counts
    predicted from a transition the runtime learns from the step's own
    routing (`moe_rt/step_predictor.h`; none in the first step).

    ```mlir
    %place = moe.plan_placement %n on @cluster axes = [0, 1] experts = 8
               : (tensor<8x8xi32>) -> tensor<8xi32>
    ```
  }];
  let arguments = !con((ins Moe_IndexTensor:$counts), groupArgs,
    (ins ConfinedAttr<I64Attr, [IntPositive]>:$num_experts,
         UnitAttr:$identity, UnitAttr:$gather_only));
  let results = (outs Moe_IndexTensor:$result);
  let assemblyFormat = [{
    $counts `on` $grid `axes` `=` $axes `experts` `=` $num_experts
    (`identity` $identity^)? (`gather_only` $gather_only^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Moe_MoveSamplesOp : Moe_CollectiveOp<"move_samples"> {
  let summary = "whole samples of an integer tensor to their new ranks";
  let description = [{
    What follows a sample when NetMoE places it (labels): `input : B x ...`
    on every rank of the group, `placement : (G·B)` new ranks (B each, a
    `moe.plan_placement`); the result holds the samples s with
    `placement[s]` = this rank, in increasing s — the order of a placing
    `moe.combine`'s result. Integers only (no gradient).

    ```mlir
    %l1 = moe.move_samples %l0 to(%place) on @cluster axes = [0, 1]
            : (tensor<4x16xi64>, tensor<8xi32>) -> tensor<4x16xi64>
    ```
  }];
  let arguments = !con((ins Moe_IndexTensor:$input,
                            Moe_IndexTensor:$placement), groupArgs);
  let results = (outs Moe_IndexTensor:$result);
  let assemblyFormat = [{
    $input `to` `(` $placement `)` `on` $grid `axes` `=` $axes
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

// Expert sharding on the variable-count path (moe-expert-sharding on a
// moe-variable-dropless layer): the all-gather-v / reduce-scatter-v pair that
// upstream shard.all_gather / shard.reduce_scatter cannot express (static,
// equal parts). Verifiers in lib/Dialect/Moe/ShardRowsOps.cpp.
def Moe_GatherRowsOp : Moe_CollectiveOp<"gather_rows"> {
  let summary = "all-gather-v of variable-count expert rows over a node";
  let description = [{
    FSMoE's expert-sharding all-gather (seeds/001 Fig. 2) for a
    variable-count dispatch: `input` is the rank's `E_l x R x M` expert
    side (local expert l's rows packed from row 0, then zeros) and `rows`
    its `E_l x G` counts (`moe.dispatch`'s second result). The S ranks of
    the group (`axes` of `grid`) exchange their counts, then each expert's
    filled rows: `result` holds, for local expert l, rank 0's rows, then
    rank 1's, ... packed from row 0 (then zeros), and `gathered_rows`
    (`E_l x S·G`) the ranks' `rows` side by side, so the expert after it
    computes over the node's Σ rows. R bounds the node's rows per expert
    too: a load over it fails on every rank, naming the op and the block.
    Its vjp is the reduce-scatter-v of `moe.scatter_rows` (counts exchanged
    again: a vjp's primals are its operands).

    An own op rather than upstream `shard.all_gather`, which concatenates
    equal slices along one axis and has no operand for run-time counts;
    here each expert's rows are runs of run-time length from each rank
    (docs/passes/moe-expert-sharding.md, "Why own ops").

    ```mlir
    %g:2 = moe.gather_rows %d#0, %d#1 on @cluster axes = [1]
             : (tensor<2x64x16xf32>, tensor<2x2xi64>)
             -> (tensor<2x64x16xf32>, tensor<2x4xi64>)
    ```
  }];
  let arguments = !con((ins Moe_FloatTensor:$input, Moe_IndexTensor:$rows),
                       groupArgs);
  let results = (outs Moe_FloatTensor:$result,
                      Moe_IndexTensor:$gathered_rows);
  let assemblyFormat = [{
    $input `,` $rows `on` $grid `axes` `=` $axes
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Moe_ScatterRowsOp : Moe_CollectiveOp<"scatter_rows"> {
  let summary = "reduce-scatter-v of variable-count expert rows over a node";
  let description = [{
    The adjoint of `moe.gather_rows`: `input` is laid out as a gather's
    result (`E_l x R x M`, local expert l's rows from rank 0, 1, ... of the
    group) and `rows` are its `gathered_rows` (`E_l x S·G`). The rows are
    summed over the S ranks and each rank receives its own run of every
    expert, packed from row 0 (then zeros): with H sharded over the node,
    the sum of the ranks' partial expert outputs. No counts exchange: the
    gathered counts say every rank's run. Its vjp is the gather's
    all-gather-v with those counts.

    ```mlir
    %s = moe.scatter_rows %y, %g#1 on @cluster axes = [1]
           : (tensor<2x64x16xf32>, tensor<2x4xi64>) -> tensor<2x64x16xf32>
    ```
  }];
  let arguments = !con((ins Moe_FloatTensor:$input, Moe_IndexTensor:$rows),
                       groupArgs);
  let results = (outs Moe_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $rows `on` $grid `axes` `=` $axes
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Moe_AllReduceOp : Moe_CollectiveOp<"all_reduce",
    [DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "sum-all-reduce of gradients, or of a byte range (chunk) of one";
  let description = [{
    Sums each operand over the data-parallel group (`axes` of `grid`) and
    returns the sums. With `bytes [offset, size]` the op has exactly one
    static-shaped operand and only that byte range is reduced; the rest of
    the result equals the operand. FlowMoE §3.3 slices a block's gradient
    all-reduce into such S_p-byte chunks, each a low-priority communication
    task.

    ```mlir
    %g:2 = moe.all_reduce %gq, %gk on @cluster axes = [0, 1]
             : tensor<128x128xf32>, tensor<128x128xf32>
    %c = moe.all_reduce %gq on @cluster axes = [0, 1] bytes [0, 32768]
             : tensor<128x128xf32>
    ```
  }];
  let arguments = !con((ins Variadic<Moe_FloatTensor>:$inputs), groupArgs,
    (ins OptionalAttr<DenseI64ArrayAttr>:$bytes));
  let results = (outs Variadic<Moe_FloatTensor>:$results);
  let assemblyFormat = [{
    $inputs `on` $grid `axes` `=` $axes (`bytes` $bytes^)?
    attr-dict `:` type($inputs)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    bool isChunk() { return getBytes().has_value(); }
  }];
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

def Moe_VjpOp : Moe_Op<"vjp", [
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects,
    AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<Moe_TaskOpInterface, ["isCommunication"]>]> {
  let summary = "vector-Jacobian product (backward) of one op";
  let description = [{
    The backward task of the single op in its body: given the op's inputs
    (`primals`, bound to the body's arguments) and one cotangent per
    floating-point result of the op, returns one gradient per
    floating-point operand, in operand order (integer operands such as
    routing indices and token ids get none).

    ```mlir
    %dx, %dup, %ddown = moe.vjp (%a = %x : tensor<1x32x16xf32>,
                                 %b = %up : tensor<1x16x32xf32>,
                                 %c = %down : tensor<1x32x16xf32>)
        cotangents(%dy : tensor<1x32x16xf32>)
        -> (tensor<1x32x16xf32>, tensor<1x16x32xf32>, tensor<1x32x16xf32>) {
      %y = moe.expert relu %a up(%b) down(%c) : (...) -> tensor<1x32x16xf32>
      moe.yield %y : tensor<1x32x16xf32>
    }
    ```

    One generic op rather than one `*_grad` op per forward op: every
    backward task has the same shape (primals, cotangents → gradients),
    the verifier checks it once, and the runtime maps the body op's name to
    its backward kernel. The vjp of a collective is a collective: the
    adjoint of `moe.dispatch` is a combine-direction all-to-all and vice
    versa (FlowMoE Eqs. 4–5), so `moe.vjp` of `moe.dispatch`/`moe.combine`
    runs on a communication stream. How activations are obtained (saved or
    recomputed from the primals) is the runtime's choice.
  }];
  let arguments = (ins Variadic<AnyType>:$primals,
                       Variadic<AnyType>:$cotangents);
  let results = (outs Variadic<AnyType>:$gradients);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The op whose backward this is.
    ::mlir::Operation *getForwardOp();
    /// Grid and axes of the collective this vjp is the adjoint of, if any.
    ::mlir::moe::CollectiveOpInterface getCollective();
    /// The cotangent of result `index` of the body op; null for an integer
    /// result (it has none).
    ::mlir::Value getCotangentOf(unsigned index);
    /// The gradient of operand `index` of the body op; null for an integer
    /// operand (it has none).
    ::mlir::Value getGradientOf(unsigned index);
  }];
}

def Moe_SgdOp : Moe_ComputeOp<"sgd", [AllTypesMatch<["param", "grad", "result"]>]> {
  let summary = "optimizer update: param - lr * grad";
  let description = [{
    The step's parameter update (plain SGD). Returns the new value of the
    parameter; the training step returns all of them.
  }];
  let arguments = (ins Moe_FloatTensor:$param, Moe_FloatTensor:$grad,
                       F64Attr:$lr);
  let results = (outs Moe_FloatTensor:$result);
  let assemblyFormat = [{
    $param `,` $grad `lr` `=` $lr attr-dict `:` type($result)
  }];
}

// Step inputs and norms: 0-d tensors, buildable so that the assembly
// format need not spell their types.
def Moe_ScalarF32 : 0DTensorOf<[F32]>, BuildableType<
    "::mlir::RankedTensorType::get({}, $_builder.getF32Type())">;
def Moe_ScalarI64 : 0DTensorOf<[I64]>, BuildableType<
    "::mlir::RankedTensorType::get({}, $_builder.getI64Type())">;

def Moe_AdamWOp : Moe_ComputeOp<"adamw", [
    AllTypesMatch<["param", "grad", "exp_avg", "exp_avg_sq", "new_param",
                   "new_exp_avg", "new_exp_avg_sq"]>]> {
  let summary = "AdamW update of one parameter (torch.optim.AdamW)";
  let description = [{
    Loshchilov & Hutter's decoupled weight decay, as torch.optim.AdamW
    computes it, with g = grad * scale (scale: the clip coefficient of
    `moe.clip_coef`, absent: 1), t = step, η = lr:

        p  ← p · (1 − η·weight_decay)
        m' = β1·m + (1 − β1)·g,   v' = β2·v + (1 − β2)·g²
        p' = p − η/(1 − β1^t) · m' / (sqrt(v') / sqrt(1 − β2^t) + eps)

    `lr` and `step` are step inputs (arguments with `moe.step_input`),
    `exp_avg` / `exp_avg_sq` the parameter's state (arguments with
    `moe.state`); the step returns the three new values.
  }];
  let arguments = (ins Moe_FloatTensor:$param, Moe_FloatTensor:$grad,
                       Moe_FloatTensor:$exp_avg, Moe_FloatTensor:$exp_avg_sq,
                       Moe_ScalarF32:$lr, Moe_ScalarI64:$step,
                       Optional<Moe_ScalarF32>:$scale,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay);
  let results = (outs Moe_FloatTensor:$new_param,
                      Moe_FloatTensor:$new_exp_avg,
                      Moe_FloatTensor:$new_exp_avg_sq);
  let assemblyFormat = [{
    $param `,` $grad `state` `(` $exp_avg `,` $exp_avg_sq `)` `lr` $lr
    `step` $step (`scale` $scale^)? attr-dict `:` type($param)
  }];
}

def Moe_SgdMomentumOp : Moe_ComputeOp<"sgd_momentum", [
    AllTypesMatch<["param", "grad", "buffer", "new_param", "new_buffer"]>]> {
  let summary = "SGD with momentum of one parameter (torch.optim.SGD)";
  let description = [{
    torch.optim.SGD with dampening 0 and without Nesterov, g = grad * scale:

        d = g + weight_decay·p,   b' = momentum·b + d,   p' = p − lr·b'

    (torch's first step sets b = d, which b = 0 gives). `buffer` is the
    parameter's `momentum_buffer` state, `lr` a step input.
  }];
  let arguments = (ins Moe_FloatTensor:$param, Moe_FloatTensor:$grad,
                       Moe_FloatTensor:$buffer, Moe_ScalarF32:$lr,
                       Optional<Moe_ScalarF32>:$scale,
                       F64Attr:$momentum, F64Attr:$weight_decay);
  let results = (outs Moe_FloatTensor:$new_param, Moe_FloatTensor:$new_buffer);
  let assemblyFormat = [{
    $param `,` $grad `state` `(` $buffer `)` `lr` $lr (`scale` $scale^)?
    attr-dict `:` type($param)
  }];
}

def Moe_SumSquaresOp : Moe_ComputeOp<"sum_squares"> {
  let summary = "sum of the squares of every element of the inputs";
  let description = [{
    Σ x² over all elements of all inputs, as a tensor<f32>: this rank's
    part of the squared global gradient norm (clip_grad_norm_).
  }];
  let arguments = (ins Variadic<Moe_FloatTensor>:$inputs);
  let results = (outs Moe_ScalarF32:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs)";
}

def Moe_ClipCoefOp : Moe_ComputeOp<"clip_coef"> {
  let summary = "gradient clipping coefficient from the squared global norm";
  let description = [{
    min(1, max_norm / (sqrt(sum_sq) + 1e-6)), as
    torch.nn.utils.clip_grad_norm_ scales the gradients.
  }];
  let arguments = (ins Moe_ScalarF32:$sum_sq, F64Attr:$max_norm);
  let results = (outs Moe_ScalarF32:$result);
  let assemblyFormat = "$sum_sq `max_norm` `=` $max_norm attr-dict";
}

//===----------------------------------------------------------------------===//
// Scheduling
//===----------------------------------------------------------------------===//

def Moe_SplitOp : Moe_Op<"split", [Pure]> {
  let summary = "split a tensor into equal micro-batches along dimension 0";
  let description = [{
    `moe.split %x : tensor<4x...> -> tensor<2x...>, tensor<2x...>` cuts the
    batch dimension into R equal micro-batches (FlowMoE §3.2). All results
    have the same type, and R divides dimension 0.
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($results)";
  let hasVerifier = 1;
  // split(merge(a, b)) -> a, b: micro-batches flow across block boundaries.
  let hasFolder = 1;
}

def Moe_MergeOp : Moe_Op<"merge", [Pure]> {
  let summary = "concatenate micro-batches along dimension 0";
  let description = [{
    The inverse of `moe.split`: all operands have the same type and the
    result's dimension 0 is their sum.
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($result)";
  let hasVerifier = 1;
}

def Moe_SlotWindowOp : Moe_Op<"slot_window", [Pure]> {
  let summary = "re-cut token chunks of a dispatched buffer along its slots";
  let description = [{
    Token-level pipelining (`moe-token-pipeline`) cuts the E_l x (G·C) x M
    expert side of an MoE layer into windows of capacity slots, and the
    backward may use other windows than the forward (FSMoE's r_bwd ≠
    r_fwd). This op assembles one window from forward chunks: the inputs
    are E_l x (G·c_i) x M buffers holding consecutive windows of the slots
    starting at slot `from` (input i holds [from + Σ_{j<i} c_j, ... + c_i)
    of every expert and every one of the `groups` = G source ranks), and
    the result holds the slots [first, first + count) of `window`, which
    must lie inside them. A local copy: no communication, no arithmetic.

    ```mlir
    // G = 4, forward windows [0, 2) and [2, 4); backward window [1, 3)
    %w = moe.slot_window %d0, %d1 groups = 4 from = 0 window [1, 2]
           : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x16xf32>
    ```
  }];
  let arguments = (ins Variadic<Moe_FloatTensor>:$inputs,
                       ConfinedAttr<I64Attr, [IntPositive]>:$groups,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$from,
                       DenseI64ArrayAttr:$window);
  let results = (outs Moe_FloatTensor:$result);
  let assemblyFormat = [{
    $inputs `groups` `=` $groups `from` `=` $from `window` $window
    attr-dict `:` type($inputs) `->` type($result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Slots per expert and source rank held by input i / the result.
    int64_t slotsOf(::mlir::Value v) {
      return ::llvm::cast<::mlir::ShapedType>(v.getType()).getDimSize(1) /
             getGroups();
    }
  }];
}

def Moe_RowsWindowOp : Moe_Op<"rows_window",
                                [Pure, AttrSizedOperandSegments]> {
  let summary = "re-cut variable-count token chunks for another degree";
  let description = [{
    The variable-count analogue of `moe.slot_window`: token-level
    pipelining of a dropless layer (`moe-token-pipeline`) cuts the rows
    each rank sends each expert into r_fwd chunks (`moe.dispatch ... part
    [j, r_fwd]`), and a backward with another degree r_bwd needs the
    experts' input and output on its own chunks. The inputs are the r_fwd
    forward chunks' E_l x R x M buffers, in chunk order, and their `rows`
    (E_l x G each); the results are chunk `part = [i, r_bwd]`'s buffer,
    packed as `moe.dispatch ... part [i, r_bwd]` packs it (local expert l's
    rows from source rank 0, 1, ... in turn), and its `rows`. For every
    (local expert, source rank) with c rows in all (the sum of the inputs'
    rows), forward chunk j holds the run [⌊j·c/r_fwd⌋, ⌊(j+1)·c/r_fwd⌋)
    and the result the run [⌊i·c/r_bwd⌋, ⌊(i+1)·c/r_bwd⌋); the sizes are
    data, read at run time. A local copy: no communication, no arithmetic.

    ```mlir
    // r_fwd = 2, r_bwd = 4: backward chunk 1 of 4
    %w:2 = moe.rows_window %e0, %e1 rows(%r0, %r1) part [1, 4]
             : (tensor<2x64x16xf32>, tensor<2x64x16xf32>, tensor<2x2xi32>,
                tensor<2x2xi32>) -> (tensor<2x64x16xf32>, tensor<2x2xi32>)
    ```
  }];
  let arguments = (ins Variadic<Moe_FloatTensor>:$inputs,
                       Variadic<Moe_IndexTensor>:$input_rows,
                       DenseI64ArrayAttr:$part);
  let results = (outs Moe_FloatTensor:$result, Moe_IndexTensor:$rows);
  let assemblyFormat = [{
    $inputs `rows` `(` $input_rows `)` `part` $part
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Moe_RecordEventOp : Moe_Op<"record_event"> {
  let summary = "record the completion point of a stream";
  let description = [{
    Completes when every task issued on `stream` before it (in program order)
    has completed.
  }];
  let arguments = (ins Moe_StreamAttr:$stream);
  let results = (outs Moe_EventType:$event);
  let assemblyFormat = "`on` $stream attr-dict";
}

def Moe_WaitEventOp : Moe_Op<"wait_event"> {
  let summary = "make a stream wait for an event";
  let description = [{
    Tasks issued on `stream` after this op do not start before `event` has
    completed. Waiting on an event recorded on the same compute stream is
    rejected: stream order already implies it. On a communication stream,
    whose all-to-alls and all-reduces sit in two queues that only events
    order (FlowMoE Alg. 2), it holds the next task's queue until the task
    before the record completes (`moe-schedule policy=fsmoe` keeps a
    gradient slice after its window's all-to-alls so).
  }];
  let arguments = (ins Moe_EventType:$event, Moe_StreamAttr:$stream);
  let assemblyFormat = "$event `on` $stream attr-dict";
  let hasVerifier = 1;
}

#endif // MOE_OPS_TD
