//===- MoeAttrs.td - moe dialect attributes and enums ------*- tablegen -*-===//

#ifndef MOE_ATTRS_TD
#define MOE_ATTRS_TD

include "MoeDialect.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Moe_GateKind : I32EnumAttr<"GateKind", "router kind", [
    I32EnumAttrCase<"softmax_topk", 0>,
    I32EnumAttrCase<"noisy_topk", 1>,
    I32EnumAttrCase<"sigmoid", 2>,
    I32EnumAttrCase<"cosine", 3>,
    I32EnumAttrCase<"expert_choice", 4>]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}
def Moe_GateKindAttr : EnumAttr<Moe_Dialect, Moe_GateKind, "gate_kind"> {
  let assemblyFormat = "$value";
}

def Moe_Activation : I32EnumAttr<"Activation", "expert activation", [
    I32EnumAttrCase<"relu", 0>,
    I32EnumAttrCase<"gelu", 1>,
    I32EnumAttrCase<"silu", 2>]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}
def Moe_ActivationAttr : EnumAttr<Moe_Dialect, Moe_Activation, "activation"> {
  let assemblyFormat = "$value";
}

def Moe_NormKind : I32EnumAttr<"NormKind", "normalisation kind", [
    I32EnumAttrCase<"layer", 0>,
    I32EnumAttrCase<"rms", 1>]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}
def Moe_NormKindAttr : EnumAttr<Moe_Dialect, Moe_NormKind, "norm_kind"> {
  let assemblyFormat = "$value";
}

def Moe_RotaryLayout : I32EnumAttr<"RotaryLayout", "rotary lane pairing", [
    I32EnumAttrCase<"rotate_half", 0>,
    I32EnumAttrCase<"interleaved", 1>]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}
def Moe_RotaryLayoutAttr
    : EnumAttr<Moe_Dialect, Moe_RotaryLayout, "rotary_layout"> {
  let assemblyFormat = "$value";
}

def Moe_StreamKind : I32EnumAttr<"StreamKind", "stream kind", [
    I32EnumAttrCase<"compute", 0>,
    I32EnumAttrCase<"comm", 1>,
    I32EnumAttrCase<"host", 2>]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}
def Moe_StreamKindAttr : EnumAttr<Moe_Dialect, Moe_StreamKind, "stream_kind"> {
  let assemblyFormat = "$value";
}

def Moe_TaskKind : I32EnumAttr<"TaskKind", "FlowMoE task kind", [
    I32EnumAttrCase<"PRE", 0>,
    I32EnumAttrCase<"AT", 1>,
    I32EnumAttrCase<"D", 2>,
    I32EnumAttrCase<"E", 3>,
    I32EnumAttrCase<"C", 4>,
    I32EnumAttrCase<"HEAD", 5>,
    I32EnumAttrCase<"AR", 6>,
    I32EnumAttrCase<"OPT", 7>]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}

def Moe_Phase : I32EnumAttr<"Phase", "forward or backward", [
    I32EnumAttrCase<"fwd", 0>,
    I32EnumAttrCase<"bwd", 1>]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

def Moe_TaskAttr : AttrDef<Moe_Dialect, "Task"> {
  let mnemonic = "task";
  let summary = "which FlowMoE task an op belongs to";
  let description = [{
    `#moe.task<AT, fwd, block = 1, micro = 2>` labels an op of a training
    step with its task in FlowMoE's model (§3.2): the kind (AT = MHA +
    gate, D = dispatch, E = experts, C = combine, AR = gradient all-reduce;
    PRE = embeddings, HEAD = final norm, LM head and loss, OPT = optimizer
    update), the phase, the block l (0-based) and the micro-batch r
    (0-based). AR tasks carry `chunk` (0-based) once sliced into S_p
    chunks. Several ops (e.g. attention, residual add, norm and gate) form
    one task. Set by `moe-build-train-step` and `moe-microbatch`; read by
    `moe-schedule`, the schedule verifier and the simulator.
  }];
  let parameters = (ins
    EnumParameter<Moe_TaskKind>:$kind,
    EnumParameter<Moe_Phase>:$phase,
    DefaultValuedParameter<"int64_t", "-1">:$block,
    DefaultValuedParameter<"int64_t", "0">:$micro,
    DefaultValuedParameter<"int64_t", "-1">:$chunk);
  // `<AT, fwd, block = 1, micro = 2>`; defaults (block -1, micro 0,
  // chunk -1) are omitted. Custom because declarative optional groups that
  // all start with `,` cannot be told apart while parsing.
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    /// "AT_2^(1)"-style name used in schedules and diagnostics, 1-based as
    /// in the paper.
    std::string getLabel() const;
  }];
}


class Moe_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Moe_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Moe_StreamAttr : Moe_Attr<"Stream", "stream"> {
  let summary = "a compute, communication or host-planner stream of one rank";
  let description = [{
    `#moe.stream<compute>`, `#moe.stream<comm, 1>` or `#moe.stream<host>`:
    the kind of resource and an index among streams of that kind (default
    0). FlowMoE uses one compute and one communication stream; FSMoE adds a
    second communication stream for intra-node collectives. A `host` stream
    is a host thread that runs host planners (ops with the `HostPlanner`
    trait, e.g. `moe.plan_placement`) and nothing else: its start and join
    are ordinary events (docs/host-planners.md).
  }];
  let parameters = (ins
    EnumParameter<Moe_StreamKind>:$kind,
    DefaultValuedParameter<"int64_t", "0">:$index);
  let assemblyFormat = "`<` $kind (`,` $index^)? `>`";
  let genVerifyDecl = 1;
}

def Moe_ModelAttr : Moe_Attr<"Model", "model"> {
  let summary = "hyper-parameters and device grid of an MoE model";
  let description = [{
    Attached to the model's `func.func` as `moe.model`. The fields are
    FlowMoE's notation (Table 2): `layers` L, `batch` B (samples per GPU),
    `seq` N (tokens per sample), `embed` M, `hidden` H (expert FFN hidden
    size), `experts` E (total), `top_k` k and `capacity_factor` f, or
    `dropless` for no capacity limit. `grid` names a `shard.grid` whose axis 0
    is nodes and axis 1 is GPUs per node; `ep_axes`, `dp_axes` and
    `intra_axes` are the grid axes of the expert-parallel, data-parallel and
    intra-node groups.

    ```mlir
    #moe.model<layers = 12, batch = 4, seq = 256, embed = 256, hidden = 512,
               experts = 16, top_k = 2, capacity_factor = 1.0,
               grid = @cluster, ep_axes = [0, 1], dp_axes = [0, 1],
               intra_axes = [1]>
    ```

    The verifier checks it against the function body: one `moe.block` per
    layer, every gate's experts / k / capacity factor, token shapes B x N x M
    and expert hidden size H, and collectives on the declared groups. It
    refuses a data-parallel axis of more than one rank that is not in
    `ep_axes` (unless the experts are sharded over it, `moe.hidden_shard`,
    as moe-expert-sharding does on the intra axes): each expert would be
    replicated over it, and nothing keeps the replicas equal (no all-reduce
    of expert gradients over them), so they would train apart.
  }];
  let parameters = (ins
    "int64_t":$layers,
    "int64_t":$batch,
    "int64_t":$seq,
    "int64_t":$embed,
    "int64_t":$hidden,
    "int64_t":$experts,
    "int64_t":$topK,
    // 0 means dropless (no capacity limit).
    APFloatParameter<"capacity factor f">:$capacityFactor,
    "::mlir::FlatSymbolRefAttr":$grid,
    ArrayRefParameter<"int16_t">:$epAxes,
    ArrayRefParameter<"int16_t">:$dpAxes,
    ArrayRefParameter<"int16_t">:$intraAxes);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// f as a double; 0 when dropless.
    double getF() const { return getCapacityFactor().convertToDouble(); }
    bool isDropless() const { return getF() == 0.0; }
    /// C = ceil(f * k * B * N / E) tokens per expert per rank (FlowMoE §2.2).
    int64_t getCapacity() const;
  }];
}

def Moe_SourceAttr : Moe_Attr<"Source", "source"> {
  let summary = "where an imported parameter's values are";
  let description = [{
    On a parameter argument of an imported model, as `moe.source`: the
    importer leaves the weights in the ONNX file and records where each
    parameter's values are; the tools that run or export a step read them
    back (tools/param-loading/WeightLoader.h), each rank the experts it
    holds.

    ```mlir
    %w: tensor<2x64x96xf32> {moe.param = "block0.experts.up",
        moe.source = #moe.source<file = "m.onnx", names = ["e0.w3", "e1.w3",
                                 "e2.w3", "e3.w3"], stacked, transpose>}
    ```

    - `file`: the ONNX file; a relative path is looked up from the working
      directory, then next to the step's IR file.
    - `names`: the initializers, exactly one unless `stacked`.
    - `scale = s`: every value times s (a constant the importer folded).
    - `slice = [axis, begin, size]`: each initializer's slice along `axis`
      (one part of a packed projection), size > 0. With `stacked`, an
      optional fourth entry `stride` > 0 moves initializer n's begin to
      begin + n·stride: one parameter holding every expert's matrix (DBRX's
      w1 / v1 / w2), named once per expert.
    - `stacked`: one initializer per expert, stacked along a new first
      dimension.
    - `transpose`: each initializer's last two dimensions swapped.

    Applied in the order slice, transpose, stack, scale.
  }];
  let parameters = (ins
    "::mlir::StringAttr":$file,
    ArrayRefParameter<"::mlir::StringAttr", "initializer names">:$names,
    OptionalParameter<"::mlir::FloatAttr", "scale (absent: 1)">:$scale,
    OptionalArrayRefParameter<"int64_t", "axis, begin, size">:$slice,
    DefaultValuedParameter<"bool", "false">:$stacked,
    DefaultValuedParameter<"bool", "false">:$transpose);
  // `<file = "m.onnx", names = ["a"], scale = 2.0, slice = [0, 1, 2],
  // stacked, transpose>`: the optional keys in any order, each once.
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    double getScaleOrOne() const {
      return getScale() ? getScale().getValueAsDouble() : 1.0;
    }
  }];
}

#endif // MOE_ATTRS_TD
