//===- ModelSpec.h - an MoE transformer as the frontends see it -*- C++ -*-===//
//
// The contract between the frontends and the IR builder. The ONNX importer
// (OnnxImport.h) recognises a model's blocks and fills a ModelSpec; the
// Hugging Face config.json frontend (HfConfigImport.h) fills one from
// hyper-parameters alone; buildModule() turns either into the same `moe`
// IR the shipped examples use (python/gen_model_mlir.py writes that shape).
//
// Shapes in a ModelSpec are the whole model's (all E experts); the builder
// derives each rank's share from the grid. Weights are never copied into the
// IR: each parameter carries where its values come from (WeightSource), and
// the builder writes that as the function argument's `moe.source` attribute.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_FRONTEND_MODELSPEC_H
#define MOE_FRONTEND_MODELSPEC_H

#include "moe/Dialect/Moe/MoeAttrs.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir::moe::frontend {

/// Where one `moe` parameter's values come from: ONNX initializers, taken
/// whole or as a slice, transposed or not, stacked along a new leading axis
/// when the parameter has an expert axis. An empty `initializers` list means
/// the values are not in the source (shape-only import, HF config): the
/// runtime initialises them (and says so).
struct WeightSource {
  /// One name per expert when `stacked`, else exactly one name.
  std::vector<std::string> initializers;
  /// Stack the initializers along a new leading (expert) axis.
  bool stacked = false;
  /// Swap the last two axes of each initializer after slicing: PyTorch's
  /// Linear keeps `out x in`; `moe` weights are `in x out`.
  bool transpose = false;
  /// Take `sliceSize` entries from `sliceBegin` along `sliceAxis` (e.g. Q, K
  /// or V rows of nn.MultiheadAttention's packed in_proj_weight); -1: whole.
  int64_t sliceAxis = -1, sliceBegin = 0, sliceSize = 0;
  /// With `stacked`: initializer n's slice starts at sliceBegin + n ·
  /// sliceStride (DBRX's experts: the same (E·F) x M parameter listed once
  /// per expert, expert e its rows [e·F, (e+1)·F)); 0: every one at
  /// sliceBegin.
  int64_t sliceStride = 0;
  /// Multiply by this after the other steps (e.g. a folded 1/sqrt(d) or a
  /// sign); 1 leaves the values alone.
  double scale = 1.0;
  /// The ONNX file (for external data: the directory next to it) that holds
  /// the initializers; empty when there are none.
  std::string file;
};

/// One model parameter: its `moe.param` name (e.g. "block0.attn.wq"), the
/// whole model's shape, and its source.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  WeightSource source;
};

struct AttentionSpec {
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  bool causal = true, rotary = false;
  /// Rotary base (theta); 10000 in GPT-NeoX/LLaMA, 1e6 in HF Mixtral.
  double rotaryBase = 10000.0;
  /// Which lanes rotary pairs (the dialect's enum, MoeAttrs.td).
  RotaryLayout rotaryLayout = RotaryLayout::rotate_half;
  /// Biases on the Q, K, V projections (parameters block<i>.attn.{bq,bk,bv};
  /// Qwen2, nn.MultiheadAttention) and on the output projection
  /// (block<i>.attn.bo).
  bool qkvBias = false, outBias = false;
  /// Clamp of the Q, K, V projections to [-c, c] (DBRX's clip_qkv);
  /// nullopt: none.
  std::optional<double> clipQkv;
  /// Where the rotary embedding is (its first ONNX node); errors about it
  /// point there. nullopt: at `loc`.
  std::optional<Location> rotaryLoc;
  /// Pre-norm applied to the block input before attention; nullopt: none.
  std::optional<NormKind> prenorm = NormKind::layer;
  double epsilon = 1e-5;
  /// Where this came from (the ONNX node that anchors it, or the config).
  Location loc;
  explicit AttentionSpec(Location loc) : loc(loc) {}
};

struct MoeLayerSpec {
  GateKind gate = GateKind::softmax_topk;
  int64_t experts = 0, topK = 1;
  /// nullopt: dropless.
  std::optional<double> capacityFactor = 1.0;
  /// Renormalise the k kept weights to sum to 1 (Mixtral, DeepSeek top-k).
  bool normalize = false;
  Activation activation = Activation::gelu;
  /// SwiGLU-style experts (a gate projection beside up).
  bool gated = false;
  int64_t hidden = 0;
  /// DeepSeek shared experts, as one dense FFN of hidden size
  /// `sharedHidden` (S shared experts of size H_s: S·H_s); 0: none.
  int64_t sharedHidden = 0;
  /// Qwen2-MoE: the shared experts' output scaled per token by
  /// sigmoid(x · w_g) (moe.sigmoid_gate; parameter block<i>.shared.out_gate,
  /// M x 1).
  bool sharedGate = false;
  /// Norm applied before the gate; nullopt: none.
  std::optional<NormKind> prenorm = NormKind::layer;
  double epsilon = 1e-5;
  Location loc;
  explicit MoeLayerSpec(Location loc) : loc(loc) {}
};

/// One transformer block: attention, then a routed MoE layer (or, for a
/// dense block such as DeepSeek's first layers, only `denseHidden`).
struct BlockSpec {
  AttentionSpec attention;
  std::optional<MoeLayerSpec> moe;
  /// Dense FFN hidden size for a block without routing (then `moe` is
  /// nullopt); built as a moe.shared_expert.
  int64_t denseHidden = 0;
  /// The dense FFN's activation, SwiGLU-style gate projection, and the norm
  /// before it (used only when `moe` is nullopt; the parameters are
  /// block<i>.shared.{up,gate,down} and block<i>.moe_norm.{scale,bias}).
  Activation denseActivation = Activation::gelu;
  bool denseGated = false;
  std::optional<NormKind> densePrenorm = NormKind::layer;
  double denseEpsilon = 1e-5;
  /// Post-norm (BERT): a norm after each residual add, x = norm(x + f(x)),
  /// parameters block<i>.attn_postnorm.* and block<i>.ffn_postnorm.*;
  /// nullopt: none (pre-norm blocks have their norms in the specs above).
  std::optional<NormKind> postnorm;
  double postEpsilon = 1e-5;
  explicit BlockSpec(Location loc) : attention(loc) {}
};

/// The ops buildModule writes, as places a frontend can attribute its
/// source to (ModelSpec::origins): one per op of a block, and the
/// model-level ops.
enum class OpSite {
  embedding,
  positions,    // moe.position_embedding (learned absolute positions)
  attention,    // moe.attention (with its pre-norm)
  attnResidual, // arith.addf of the attention output to the stream
  attnPostNorm, // moe.norm after the attention residual (post-norm blocks)
  ffnNorm,      // moe.norm before the gate / dense FFN
  gate,
  dispatch,
  expert,
  combine,
  sharedExpert, // moe.shared_expert (shared experts, or a dense block's FFN)
  sharedGate,   // moe.sigmoid_gate of the shared experts (Qwen2-MoE)
  sharedAdd,    // arith.addf of the shared experts to the routed output
  ffnResidual,  // arith.addf of the FFN output to the stream
  ffnPostNorm,  // moe.norm after the FFN residual (post-norm blocks)
  finalNorm,
  lmHead,
  loss,
};
/// "moe.attention", "arith.addf (residual)", ...: what the report prints.
llvm::StringRef opSiteName(OpSite site);

/// The metadata of the FusedLoc an op built from `origins` carries, so a
/// reader can tell an op's source nodes from other locations.
constexpr llvm::StringLiteral kOriginsLocTag = "moe.origins";

struct ModelSpec {
  /// Symbol name of the generated func (sanitised by the builder).
  std::string name = "model";
  /// One line for the module's header comment / summary (where it came from).
  std::string origin;
  int64_t vocab = 0, batch = 0, seq = 0, embed = 0;
  /// Learned absolute position embeddings (GPT-2's wpe): the table's rows
  /// (parameter embed.positions, positions x embed), added to the token
  /// embeddings; 0: none.
  int64_t positions = 0;
  std::vector<BlockSpec> blocks;
  /// Final norm before the LM head; nullopt: none.
  std::optional<NormKind> finalNorm = NormKind::layer;
  double finalEpsilon = 1e-5;
  /// The LM head reuses the embedding table (transposed).
  bool tiedEmbeddings = false;
  /// Device grid: nodes x GPUs per node (FlowMoE's cluster). Experts are
  /// split evenly over all nodes·gpusPerNode ranks.
  int64_t nodes = 1, gpusPerNode = 1;
  /// Every parameter, in function-argument order, with its source. The
  /// frontends fill the names the builder uses (see buildModule).
  std::vector<ParamSpec> params;
  /// Locations of the model-level ops (embedding, final norm, LM head, loss).
  std::optional<Location> embeddingLoc, headLoc;
  /// The source each built op represents (for ONNX: the NameLocs of the
  /// nodes it computes), by (block, site); block -1 for model-level ops.
  /// The builder gives such an op FusedLoc<kOriginsLocTag>(locations) as
  /// its location; ops without an entry keep the spec's locations.
  std::map<std::pair<int64_t, OpSite>, std::vector<Location>> origins;
};

/// Builds `shard.grid @cluster` and the model's func.func (tokens, labels,
/// then one argument per ModelSpec::params entry with `moe.param` and, when
/// it has initializers, `moe.source`) in the same shape as
/// python/gen_model_mlir.py writes. Parameter names it expects:
///   embed.table, embed.positions, block<i>.attn.{wq,wk,wv,wo} (+ {bq,bk,bv},
///   bo with AttentionSpec::qkvBias, outBias), block<i>.attn_norm.{scale,bias},
///   block<i>.moe_norm.{scale,bias}, block<i>.{attn,ffn}_postnorm.{scale,bias},
///   block<i>.gate.weight (+ .gate.noise for noisy_topk),
///   block<i>.experts.{up,gate,down}, block<i>.shared.{up,gate,down}
///   (+ .out_gate with sharedGate), final_norm.{scale,bias}, lm_head.weight
/// Returns null after emitting an error (at the offending spec's location)
/// when the spec is inconsistent (e.g. E not divisible by the rank count).
OwningOpRef<ModuleOp> buildModule(const ModelSpec &spec, MLIRContext *ctx);

/// Adds the parameters a spec's blocks need, with whole-model shapes and no
/// source (the shape-only case), for frontends that know only the
/// hyper-parameters. Keeps any entry already present (by name).
void addDefaultParams(ModelSpec &spec);

} // namespace mlir::moe::frontend

#endif // MOE_FRONTEND_MODELSPEC_H
