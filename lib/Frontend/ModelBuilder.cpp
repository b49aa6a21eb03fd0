//===- ModelBuilder.cpp - ModelSpec -> moe IR -----------------------------===//
//
// The one place that writes a model as `moe` IR for the frontends (ONNX and
// Hugging Face config.json). The IR has the shape python/gen_model_mlir.py
// writes for the shipped examples, so that every pass, the cost model and
// the runtime see an imported model exactly as they see a hand-written one.
//
// Parameters are function arguments named by `moe.param`; their values
// stay in the source file and are described by `moe.source`
// (docs/frontend/builder.md gives the format the runtime loader reads).
//
//===----------------------------------------------------------------------===//

#include "moe/Frontend/ModelSpec.h"

#include "moe/Dialect/Moe/MoeDialect.h"
#include "moe/Dialect/Moe/MoeOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::frontend;

namespace {

constexpr llvm::StringLiteral kGridName = "cluster";
/// Expert-parallel and data-parallel groups span the whole grid (FlowMoE's
/// setting); the intra-node group is axis 1 (GPUs of one node).
constexpr int16_t kAllAxes[] = {0, 1};
constexpr int16_t kIntraAxes[] = {1};

/// X-MoE's cosine router projects tokens to this many dimensions when the
/// frontend gives no gate.proj parameter of its own (addDefaultParams).
constexpr int64_t kDefaultCosineDim = 16;

std::string shapeString(ArrayRef<int64_t> shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + (ShapedType::isDynamic(shape[i])
                               ? std::string("?")
                               : std::to_string(shape[i]));
  return s.empty() ? "scalar" : s;
}

bool isExpertParam(StringRef name) { return name.contains(".experts."); }

/// A norm's epsilon as the shortest decimal that rounds to the same float32
/// (an ONNX file holds 1e-5 as the float32 9.99999975e-6; a config.json
/// holds 1e-05): the two frontends then build the same IR for the same
/// model, and the value differs from the source's by under half a float32
/// ulp, far below the runtime's fp32 tolerance.
double canonicalEpsilon(double eps) {
  float f = static_cast<float>(eps);
  if (!(f > 0) || std::isinf(f))
    return eps;
  for (int digits = 1; digits <= 9; ++digits) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.*e", digits - 1, eps);
    double d = std::strtod(text, nullptr);
    if (static_cast<float>(d) == f)
      return d;
  }
  return eps;
}

/// "mixtral-8x7b" -> "mixtral_8x7b": a func symbol that prints bare.
std::string sanitizeSymbol(StringRef name) {
  std::string out;
  for (char c : name)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0])))
    out = "model_" + out;
  return out;
}

/// The hyper-parameters `#moe.model` states once for the whole model; every
/// routed block must share them (the attribute holds one E, k, f, H).
struct Routing {
  int64_t experts = 0, topK = 0, hidden = 0;
  std::optional<double> capacityFactor;
  int64_t firstBlock = -1;
};

class ModuleBuilder {
public:
  ModuleBuilder(const ModelSpec &spec, MLIRContext *ctx)
      : spec(spec), ctx(ctx), b(ctx), f32(Float32Type::get(ctx)) {}

  OwningOpRef<ModuleOp> build();

private:
  const ModelSpec &spec;
  MLIRContext *ctx;
  OpBuilder b;
  Type f32;
  int64_t ranks = 1;
  Routing routing;
  /// The parameters in argument order (spec.params plus a derived tied
  /// LM head), their arguments, and which ones an op has read.
  std::vector<ParamSpec> params;
  llvm::StringMap<size_t> paramIndex;
  SmallVector<Value> paramValues;
  llvm::StringSet<> used;
  Value tokens, labels;

  FloatAttr epsilonAttr(double eps) {
    return b.getF64FloatAttr(canonicalEpsilon(eps));
  }

  Location modelLoc() const {
    if (spec.embeddingLoc)
      return *spec.embeddingLoc;
    if (!spec.blocks.empty())
      return spec.blocks.front().attention.loc;
    return UnknownLoc::get(ctx);
  }
  Location headLoc() const { return spec.headLoc.value_or(modelLoc()); }
  /// Where the op at (block, site) comes from: FusedLoc<moe.origins> of the
  /// frontend's source locations, else `fallback`.
  Location at(int64_t block, OpSite site, Location fallback) const {
    auto it = spec.origins.find({block, site});
    if (it == spec.origins.end() || it->second.empty())
      return fallback;
    return FusedLoc::get(ctx, it->second,
                         StringAttr::get(ctx, kOriginsLocTag));
  }

  RankedTensorType tensor(ArrayRef<int64_t> shape, Type elem = {}) {
    return RankedTensorType::get(shape, elem ? elem : f32);
  }

  LogicalResult checkModel();
  LogicalResult checkRouting();
  LogicalResult collectParams();
  LogicalResult checkSource(const ParamSpec &param);
  SourceAttr sourceAttr(const WeightSource &source);
  FailureOr<RankedTensorType> argType(const ParamSpec &param);

  /// The argument of parameter `name`, after checking that its whole-model
  /// shape is `shape`; emits an error at `loc` otherwise.
  FailureOr<Value> param(StringRef name, ArrayRef<int64_t> shape, Location loc);
  bool hasParam(StringRef name) const { return paramIndex.count(name); }
  /// scale (and bias, for a layer norm whose frontend provides one).
  FailureOr<SmallVector<Value>> normParams(StringRef prefix, NormKind kind,
                                           Location loc);

  /// moe.norm of `x` with the parameters under `prefix`, located at
  /// (block, site).
  FailureOr<Value> buildNorm(StringRef prefix, NormKind kind, double eps,
                             Value x, int64_t block, OpSite site,
                             Location loc);
  FailureOr<Value> buildBlock(int64_t index, const BlockSpec &block, Value x);
  FailureOr<Value> buildAttention(int64_t index, const BlockSpec &block,
                                  Value x);
  FailureOr<Value> buildMoe(int64_t index, const MoeLayerSpec &moe, Value x);
  FailureOr<Value> buildFfn(StringRef prefix, int64_t hidden, Activation act,
                            bool gated, Value x, Location loc);
  LogicalResult buildBody(func::FuncOp func);
};

LogicalResult ModuleBuilder::checkModel() {
  Location loc = modelLoc();
  std::pair<StringRef, int64_t> positives[] = {
      {"vocabulary size", spec.vocab}, {"batch B", spec.batch},
      {"sequence length N", spec.seq}, {"embedding M", spec.embed},
      {"grid nodes", spec.nodes},      {"GPUs per node", spec.gpusPerNode}};
  for (auto [what, value] : positives)
    if (value <= 0)
      return emitError(loc)
             << "model " << what << " must be positive, got " << value;
  if (spec.blocks.empty())
    return emitError(loc) << "model has no transformer blocks";
  ranks = spec.nodes * spec.gpusPerNode;
  return success();
}

LogicalResult ModuleBuilder::checkRouting() {
  for (auto [i, block] : llvm::enumerate(spec.blocks)) {
    if (!block.moe) {
      if (block.denseHidden <= 0)
        return emitError(block.attention.loc)
               << "dense block " << i << " needs a positive FFN hidden size, "
               << "got " << block.denseHidden;
      continue;
    }
    const MoeLayerSpec &m = *block.moe;
    if (m.experts <= 0 || m.topK <= 0 || m.hidden <= 0)
      return emitError(m.loc)
             << "block " << i << ": experts (" << m.experts << "), top_k ("
             << m.topK << ") and expert hidden size (" << m.hidden
             << ") must be positive";
    if (m.topK > m.experts)
      return emitError(m.loc) << "block " << i << ": top_k " << m.topK
                              << " exceeds the " << m.experts << " experts";
    if (m.experts % ranks != 0)
      return emitError(m.loc)
             << "block " << i << ": " << m.experts
             << " experts do not divide evenly over the " << ranks
             << " ranks of the " << spec.nodes << "x" << spec.gpusPerNode
             << " grid (expert parallelism needs E/P experts per rank)";
    if (m.capacityFactor &&
        !(*m.capacityFactor > 0.0 && std::isfinite(*m.capacityFactor)))
      return emitError(m.loc)
             << "block " << i << ": capacity factor must be positive, got "
             << *m.capacityFactor;
    if (m.gate == GateKind::expert_choice && !m.capacityFactor)
      return emitError(m.loc) << "block " << i
                              << ": expert-choice routing needs a capacity "
                                 "factor (it cannot be dropless)";
    if (m.sharedHidden < 0)
      return emitError(m.loc)
             << "block " << i << ": shared expert hidden size is negative";
    if (routing.firstBlock < 0) {
      routing = {m.experts, m.topK, m.hidden, m.capacityFactor,
                 static_cast<int64_t>(i)};
      continue;
    }
    // #moe.model holds one E, k, f and H for the whole model.
    if (m.experts != routing.experts || m.topK != routing.topK ||
        m.hidden != routing.hidden ||
        m.capacityFactor != routing.capacityFactor)
      return emitError(m.loc)
             << "block " << i << " routes E=" << m.experts << " k=" << m.topK
             << " H=" << m.hidden << " but block " << routing.firstBlock
             << " routes E=" << routing.experts << " k=" << routing.topK
             << " H=" << routing.hidden
             << " (or their capacity factors differ); a moe model states "
                "one E, k, f and H for all its MoE blocks";
  }
  if (routing.firstBlock < 0)
    return emitError(modelLoc())
           << "model has no MoE block (every block is dense); the moe "
              "dialect describes models with routed experts";
  return success();
}

LogicalResult ModuleBuilder::checkSource(const ParamSpec &param) {
  const WeightSource &s = param.source;
  Location loc = modelLoc();
  if (s.initializers.empty())
    return success();
  if (s.file.empty())
    return emitError(loc) << "parameter '" << param.name
                          << "' names initializers but no file";
  if (s.stacked) {
    if (param.shape.empty() ||
        static_cast<int64_t>(s.initializers.size()) != param.shape[0])
      return emitError(loc)
             << "parameter '" << param.name << "' of shape "
             << shapeString(param.shape) << " stacks " << s.initializers.size()
             << " initializers; one per entry of "
             << "its leading axis is needed";
  } else if (s.initializers.size() != 1) {
    return emitError(loc) << "parameter '" << param.name << "' lists "
                          << s.initializers.size()
                          << " initializers without stacking them";
  }
  if (s.sliceAxis >= 0 && s.sliceSize <= 0)
    return emitError(loc) << "parameter '" << param.name
                          << "' slices an empty range";
  return success();
}

/// The #moe.source of a parameter (SourceAttr, defined with its checks in
/// MoeAttrs.td; docs/frontend/builder.md), read back by the tools'
/// WeightLoader.
SourceAttr ModuleBuilder::sourceAttr(const WeightSource &s) {
  SmallVector<StringAttr> names;
  for (const std::string &name : s.initializers)
    names.push_back(b.getStringAttr(name));
  SmallVector<int64_t> slice;
  if (s.sliceAxis >= 0)
    slice = {s.sliceAxis, s.sliceBegin, s.sliceSize};
  if (s.sliceAxis >= 0 && s.sliceStride > 0)
    slice.push_back(s.sliceStride);
  return SourceAttr::get(b.getContext(), b.getStringAttr(s.file), names,
                         s.scale != 1.0 ? b.getF64FloatAttr(s.scale)
                                        : FloatAttr(),
                         slice, s.stacked, s.transpose);
}

LogicalResult ModuleBuilder::collectParams() {
  params = spec.params;
  // The dialect has no transpose to reuse the V x M table as the M x V head,
  // so a tied head is its own parameter whose source is the table's
  // initializer, transposed (docs/frontend/builder.md).
  auto find = [&](StringRef name) -> ParamSpec * {
    for (ParamSpec &p : params)
      if (p.name == name)
        return &p;
    return nullptr;
  };
  if (spec.tiedEmbeddings) {
    ParamSpec *head = find("lm_head.weight");
    if (!head) {
      params.push_back({"lm_head.weight", {spec.embed, spec.vocab}, {}});
      head = &params.back();
    }
    const ParamSpec *table = find("embed.table");
    if (table && head->source.initializers.empty() &&
        !table->source.initializers.empty()) {
      head->source = table->source;
      head->source.transpose = !table->source.transpose;
    }
  }
  for (auto [i, p] : llvm::enumerate(params)) {
    if (p.name.empty())
      return emitError(modelLoc()) << "parameter #" << i << " has no name";
    if (!paramIndex.try_emplace(p.name, i).second)
      return emitError(modelLoc())
             << "parameter '" << p.name << "' is listed twice";
    if (failed(checkSource(p)))
      return failure();
  }
  return success();
}

/// Whole-model shape, except that expert parameters hold this rank's
/// E_l = E / P experts on their leading axis.
FailureOr<RankedTensorType> ModuleBuilder::argType(const ParamSpec &p) {
  SmallVector<int64_t> shape(p.shape.begin(), p.shape.end());
  for (int64_t d : shape)
    if (d <= 0)
      return emitError(modelLoc())
             << "parameter '" << p.name << "' has shape "
             << shapeString(p.shape) << " with a non-positive dimension";
  if (isExpertParam(p.name)) {
    if (shape.empty() || shape[0] % ranks != 0)
      return emitError(modelLoc())
             << "expert parameter '" << p.name << "' of shape "
             << shapeString(p.shape) << " does not split over " << ranks
             << " ranks along its leading (expert) axis";
    shape[0] /= ranks;
  }
  return tensor(shape);
}

FailureOr<Value> ModuleBuilder::param(StringRef name, ArrayRef<int64_t> shape,
                                      Location loc) {
  auto it = paramIndex.find(name);
  if (it == paramIndex.end())
    return emitError(loc) << "the model needs parameter '" << name << "' ("
                          << shapeString(shape)
                          << ") but the frontend gave none";
  const ParamSpec &p = params[it->second];
  if (ArrayRef<int64_t>(p.shape) != shape)
    return emitError(loc) << "parameter '" << name << "' has shape "
                          << shapeString(p.shape) << " but the model needs "
                          << shapeString(shape);
  used.insert(name);
  return paramValues[it->second];
}

FailureOr<SmallVector<Value>>
ModuleBuilder::normParams(StringRef prefix, NormKind kind, Location loc) {
  SmallVector<Value> values;
  FailureOr<Value> scale = param((prefix + ".scale").str(), {spec.embed}, loc);
  if (failed(scale))
    return failure();
  values.push_back(*scale);
  std::string bias = (prefix + ".bias").str();
  if (kind == NormKind::layer && hasParam(bias)) {
    FailureOr<Value> v = param(bias, {spec.embed}, loc);
    if (failed(v))
      return failure();
    values.push_back(*v);
  }
  return values;
}

FailureOr<Value>
ModuleBuilder::buildAttention(int64_t index, const BlockSpec &block, Value x) {
  const AttentionSpec &a = block.attention;
  Location loc = a.loc;
  int64_t m = spec.embed;
  if (a.heads <= 0 || a.kvHeads <= 0 || a.headDim <= 0)
    return emitError(loc) << "block " << index << ": attention heads ("
                          << a.heads << "), kv heads (" << a.kvHeads
                          << ") and head size (" << a.headDim
                          << ") must be positive";
  std::string p = llvm::formatv("block{0}.attn.", index).str();
  int64_t q = a.heads * a.headDim, kv = a.kvHeads * a.headDim;
  FailureOr<Value> wq = param(p + "wq", {m, q}, loc);
  FailureOr<Value> wk = param(p + "wk", {m, kv}, loc);
  FailureOr<Value> wv = param(p + "wv", {m, kv}, loc);
  FailureOr<Value> wo = param(p + "wo", {q, m}, loc);
  if (failed(wq) || failed(wk) || failed(wv) || failed(wo))
    return failure();
  SmallVector<Value> norm;
  NormKindAttr normKind;
  if (a.prenorm) {
    auto values = normParams(llvm::formatv("block{0}.attn_norm", index).str(),
                             *a.prenorm, loc);
    if (failed(values))
      return failure();
    norm = *values;
    normKind = NormKindAttr::get(ctx, *a.prenorm);
  }
  SmallVector<Value> qkvBias;
  if (a.qkvBias) {
    FailureOr<Value> bq = param(p + "bq", {q}, loc);
    FailureOr<Value> bk = param(p + "bk", {kv}, loc);
    FailureOr<Value> bv = param(p + "bv", {kv}, loc);
    if (failed(bq) || failed(bk) || failed(bv))
      return failure();
    qkvBias = {*bq, *bk, *bv};
  }
  FailureOr<Value> outBias = Value();
  if (a.outBias && failed(outBias = param(p + "bo", {m}, loc)))
    return failure();
  if (a.rotary && (a.headDim % 2 || !(a.rotaryBase > 0)))
    return emitError(a.rotaryLoc.value_or(loc))
           << "block " << index << ": rotary needs an even head size and a "
           << "positive base, got head size " << a.headDim << " and theta "
           << a.rotaryBase;
  // The defaults (rotate-half, theta 10000) are left out, so both frontends
  // print them the same way.
  RotaryLayoutAttr layout;
  FloatAttr theta;
  if (a.rotary && a.rotaryLayout != RotaryLayout::rotate_half)
    layout = RotaryLayoutAttr::get(ctx, a.rotaryLayout);
  if (a.rotary && a.rotaryBase != 10000.0)
    theta = b.getF64FloatAttr(a.rotaryBase);
  auto op = AttentionOp::create(
      b, at(index, OpSite::attention, loc), x.getType(), x, *wq, *wk, *wv,
      *wo, norm, qkvBias, *outBias, b.getI64IntegerAttr(a.heads),
      b.getI64IntegerAttr(a.kvHeads), b.getI64IntegerAttr(a.headDim),
      a.causal ? b.getUnitAttr() : nullptr,
      a.rotary ? b.getUnitAttr() : nullptr, layout, theta, normKind,
      epsilonAttr(a.epsilon),
      a.clipQkv ? b.getF64FloatAttr(*a.clipQkv) : FloatAttr());
  return op.getResult();
}

FailureOr<Value> ModuleBuilder::buildFfn(StringRef prefix, int64_t hidden,
                                         Activation act, bool gated, Value x,
                                         Location loc) {
  int64_t m = spec.embed;
  FailureOr<Value> up = param((prefix + ".up").str(), {m, hidden}, loc);
  FailureOr<Value> gate = Value();
  if (gated)
    gate = param((prefix + ".gate").str(), {m, hidden}, loc);
  FailureOr<Value> down = param((prefix + ".down").str(), {hidden, m}, loc);
  if (failed(up) || failed(gate) || failed(down))
    return failure();
  return SharedExpertOp::create(b, loc, x.getType(), x, *up, *gate, *down,
                                ActivationAttr::get(ctx, act))
      .getResult();
}

FailureOr<Value> ModuleBuilder::buildMoe(int64_t index, const MoeLayerSpec &s,
                                         Value x) {
  Location loc = s.loc;
  int64_t bsz = spec.batch, n = spec.seq, m = spec.embed, e = s.experts,
          k = s.topK, h = s.hidden, el = e / ranks;
  std::string p = llvm::formatv("block{0}.", index).str();

  // Gate: weights M x E (cosine: proj M x d, weight d x E).
  Value aux;
  FailureOr<Value> weight = failure();
  if (s.gate == GateKind::cosine) {
    auto it = paramIndex.find(p + "gate.weight");
    int64_t d = it != paramIndex.end() && !params[it->second].shape.empty()
                    ? params[it->second].shape[0]
                    : kDefaultCosineDim;
    FailureOr<Value> proj = param(p + "gate.proj", {m, d}, loc);
    if (failed(proj))
      return failure();
    aux = *proj;
    weight = param(p + "gate.weight", {d, e}, loc);
  } else {
    weight = param(p + "gate.weight", {m, e}, loc);
  }
  if (failed(weight))
    return failure();
  if (s.gate == GateKind::noisy_topk) {
    FailureOr<Value> noise = param(p + "gate.noise", {m, e}, loc);
    if (failed(noise))
      return failure();
    aux = *noise;
  }

  FloatAttr factor;
  IntegerAttr capacity;
  int64_t slots = ShapedType::kDynamic;
  if (s.capacityFactor) {
    int64_t c = expertCapacity(*s.capacityFactor, k, bsz * n, e);
    factor = b.getF64FloatAttr(*s.capacityFactor);
    capacity = b.getI64IntegerAttr(c);
    slots = ranks * c;
  }
  bool expertChoice = s.gate == GateKind::expert_choice;
  SmallVector<int64_t> route =
      expertChoice ? SmallVector<int64_t>{e, capacity ? capacity.getInt() : 0}
                   : SmallVector<int64_t>{bsz, n, k};
  auto gate =
      GateOp::create(b, at(index, OpSite::gate, loc),
                     tensor(route, b.getI32Type()), tensor(route),
                     tensor({e}, b.getI32Type()), x, *weight, aux,
                     GateKindAttr::get(ctx, s.gate), b.getI64IntegerAttr(e),
                     b.getI64IntegerAttr(k), factor, capacity,
                     s.normalize ? b.getUnitAttr() : nullptr,
                     /*tau=*/nullptr, /*sample_offset=*/nullptr);

  auto gridRef = FlatSymbolRefAttr::get(ctx, kGridName);
  auto axes = b.getDenseI16ArrayAttr(kAllAxes);
  RankedTensorType slotsType = tensor({el, slots, m});
  auto dispatch = DispatchOp::create(b, at(index, OpSite::dispatch, loc),
                                    slotsType, x, gate.getIndices(),
                                    gate.getCounts(), gridRef, axes,
                                    b.getI64IntegerAttr(e), capacity);

  FailureOr<Value> up = param(p + "experts.up", {e, m, h}, loc);
  FailureOr<Value> gproj = Value();
  if (s.gated)
    gproj = param(p + "experts.gate", {e, m, h}, loc);
  FailureOr<Value> down = param(p + "experts.down", {e, h, m}, loc);
  if (failed(up) || failed(gproj) || failed(down))
    return failure();
  auto expert =
      ExpertOp::create(b, at(index, OpSite::expert, loc), slotsType,
                       dispatch.getResult(), *up, *gproj, *down,
                       /*rows=*/Value(),
                       ActivationAttr::get(ctx, s.activation));
  Value out =
      CombineOp::create(b, at(index, OpSite::combine, loc), x.getType(),
                        expert.getResult(),
                        gate.getIndices(), gate.getWeights(), gate.getCounts(),
                        gridRef, axes, b.getI64IntegerAttr(e), capacity)
          .getResult();
  if (s.sharedHidden > 0) {
    // DeepSeek: the shared experts see every token; their output joins the
    // routed experts' before the residual add.
    FailureOr<Value> shared =
        buildFfn(p + "shared", s.sharedHidden, s.activation, s.gated, x,
                 at(index, OpSite::sharedExpert, loc));
    if (failed(shared))
      return failure();
    if (s.sharedGate) {
      FailureOr<Value> wg = param(p + "shared.out_gate", {m, 1}, loc);
      if (failed(wg))
        return failure();
      shared = SigmoidGateOp::create(b, at(index, OpSite::sharedGate, loc),
                                     x.getType(), x, *wg, *shared)
                   .getResult();
    }
    out = arith::AddFOp::create(b, at(index, OpSite::sharedAdd, loc), out,
                                *shared)
              .getResult();
  }
  return out;
}

FailureOr<Value> ModuleBuilder::buildNorm(StringRef prefix, NormKind kind,
                                          double eps, Value x, int64_t block,
                                          OpSite site, Location loc) {
  auto values = normParams(prefix, kind, loc);
  if (failed(values))
    return failure();
  Value bias = values->size() > 1 ? (*values)[1] : Value();
  return NormOp::create(b, at(block, site, loc), x.getType(), x, (*values)[0],
                        bias, NormKindAttr::get(ctx, kind), epsilonAttr(eps))
      .getResult();
}

FailureOr<Value> ModuleBuilder::buildBlock(int64_t index,
                                           const BlockSpec &block, Value h) {
  Location loc = block.attention.loc;
  auto op =
      BlockOp::create(b, loc, index, ValueRange{h}, TypeRange{h.getType()});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&op.getBody().front());
  Value x = op.getBody().getArgument(0);

  FailureOr<Value> attn = buildAttention(index, block, x);
  if (failed(attn))
    return failure();
  // Post-norm (BERT): x = norm(x + f(x)); the normed sum is the stream.
  std::string p = llvm::formatv("block{0}.", index).str();
  auto postNorm = [&](Value sum, StringRef name, OpSite site,
                      Location l) -> FailureOr<Value> {
    if (!block.postnorm)
      return sum;
    return buildNorm(p + name.str(), *block.postnorm, block.postEpsilon, sum,
                     index, site, l);
  };
  FailureOr<Value> r1 = postNorm(
      arith::AddFOp::create(b, at(index, OpSite::attnResidual, loc), x, *attn)
          .getResult(),
      "attn_postnorm", OpSite::attnPostNorm, loc);
  if (failed(r1))
    return failure();

  Location ffnLoc = block.moe ? block.moe->loc : loc;
  std::optional<NormKind> prenorm =
      block.moe ? block.moe->prenorm : block.densePrenorm;
  double eps = block.moe ? block.moe->epsilon : block.denseEpsilon;
  Value normed = *r1;
  if (prenorm) {
    FailureOr<Value> n = buildNorm(p + "moe_norm", *prenorm, eps, *r1, index,
                                   OpSite::ffnNorm, ffnLoc);
    if (failed(n))
      return failure();
    normed = *n;
  }
  FailureOr<Value> ffn =
      block.moe ? buildMoe(index, *block.moe, normed)
                : buildFfn(llvm::formatv("block{0}.shared", index).str(),
                           block.denseHidden, block.denseActivation,
                           block.denseGated, normed,
                           at(index, OpSite::sharedExpert, ffnLoc));
  if (failed(ffn))
    return failure();
  FailureOr<Value> r2 = postNorm(
      arith::AddFOp::create(b, at(index, OpSite::ffnResidual, ffnLoc), *r1,
                            *ffn)
          .getResult(),
      "ffn_postnorm", OpSite::ffnPostNorm, ffnLoc);
  if (failed(r2))
    return failure();
  YieldOp::create(b, ffnLoc, ValueRange{*r2});
  return op.getResult(0);
}

LogicalResult ModuleBuilder::buildBody(func::FuncOp func) {
  b.setInsertionPointToStart(func.addEntryBlock());
  tokens = func.getArgument(0);
  labels = func.getArgument(1);
  for (size_t i = 0; i < params.size(); ++i)
    paramValues.push_back(func.getArgument(2 + i));

  int64_t bsz = spec.batch, n = spec.seq, m = spec.embed, v = spec.vocab;
  Location embLoc = modelLoc();
  FailureOr<Value> table = param("embed.table", {v, m}, embLoc);
  if (failed(table))
    return failure();
  Value h = EmbeddingOp::create(b, at(-1, OpSite::embedding, embLoc),
                                tensor({bsz, n, m}), tokens, *table)
                .getResult();
  if (spec.positions) {
    if (spec.positions < n)
      return emitError(embLoc)
             << "the model has " << spec.positions
             << " learned positions, fewer than the sequence length " << n;
    FailureOr<Value> wpe = param("embed.positions", {spec.positions, m},
                                 embLoc);
    if (failed(wpe))
      return failure();
    h = PositionEmbeddingOp::create(b, at(-1, OpSite::positions, embLoc),
                                    h.getType(), h, *wpe)
            .getResult();
  }
  for (auto [i, block] : llvm::enumerate(spec.blocks)) {
    FailureOr<Value> out = buildBlock(i, block, h);
    if (failed(out))
      return failure();
    h = *out;
  }

  Location head = headLoc();
  if (spec.finalNorm) {
    FailureOr<Value> normed =
        buildNorm("final_norm", *spec.finalNorm, spec.finalEpsilon, h, -1,
                  OpSite::finalNorm, head);
    if (failed(normed))
      return failure();
    h = *normed;
  }
  FailureOr<Value> lmHead = param("lm_head.weight", {m, v}, head);
  if (failed(lmHead))
    return failure();
  Value logits =
      LinearOp::create(b, at(-1, OpSite::lmHead, head), tensor({bsz, n, v}),
                       h, *lmHead, Value())
          .getResult();
  Value loss = CrossEntropyOp::create(b, at(-1, OpSite::loss, head),
                                      tensor({}), logits, labels)
                   .getResult();
  func::ReturnOp::create(b, head, ValueRange{loss});

  // A parameter no op reads would be silently ignored in training.
  for (const ParamSpec &p : params)
    if (!used.contains(p.name))
      return emitError(modelLoc())
             << "parameter '" << p.name
             << "' is not read by any op of the model (unknown name, or a "
                "bias/norm the model's blocks do not use)";
  return success();
}

OwningOpRef<ModuleOp> ModuleBuilder::build() {
  ctx->loadDialect<MoeDialect, arith::ArithDialect, func::FuncDialect,
                   shard::ShardDialect, tensor::TensorDialect>();
  if (failed(checkModel()) || failed(checkRouting()) || failed(collectParams()))
    return nullptr;

  // The origin rides on the module's location (a NameLoc) so that moe-opt
  // can print it as the header comment of an imported model.
  Location moduleLoc =
      spec.origin.empty()
          ? modelLoc()
          : Location(NameLoc::get(b.getStringAttr(spec.origin), modelLoc()));
  OwningOpRef<ModuleOp> module = ModuleOp::create(moduleLoc);
  b.setInsertionPointToEnd(module->getBody());
  shard::GridOp::create(b, modelLoc(), kGridName,
                        ArrayRef<int64_t>{spec.nodes, spec.gpusPerNode});

  SmallVector<Type> argTypes = {tensor({spec.batch, spec.seq}, b.getI64Type()),
                                tensor({spec.batch, spec.seq}, b.getI64Type())};
  for (const ParamSpec &p : params) {
    FailureOr<RankedTensorType> type = argType(p);
    if (failed(type))
      return nullptr;
    argTypes.push_back(*type);
  }
  auto funcType = b.getFunctionType(argTypes, {tensor({})});
  auto func =
      func::FuncOp::create(b, modelLoc(), sanitizeSymbol(spec.name), funcType);
  for (auto [i, p] : llvm::enumerate(params)) {
    func.setArgAttr(2 + i, MoeDialect::getParamAttrName(),
                    b.getStringAttr(p.name));
    if (!p.source.initializers.empty())
      func.setArgAttr(2 + i, MoeDialect::getSourceAttrName(),
                      sourceAttr(p.source));
  }
  if (failed(buildBody(func)))
    return nullptr;

  // Stated last: the attribute's verifier reads the finished body.
  auto model = ModelAttr::get(
      ctx, spec.blocks.size(), spec.batch, spec.seq, spec.embed, routing.hidden,
      routing.experts, routing.topK,
      llvm::APFloat(routing.capacityFactor.value_or(0.0)),
      FlatSymbolRefAttr::get(ctx, kGridName), kAllAxes, kAllAxes, kIntraAxes);
  func->setAttr(MoeDialect::getModelAttrName(), model);

  if (failed(mlir::verify(*module)))
    return nullptr;
  return module;
}

/// The parameters a block needs, in the order python/gen_model_mlir.py
/// writes them.
void appendBlockParams(const ModelSpec &spec, int64_t i, const BlockSpec &blk,
                       std::vector<ParamSpec> &out) {
  int64_t m = spec.embed;
  std::string p = llvm::formatv("block{0}.", i).str();
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    out.push_back({std::move(name), std::move(shape), {}});
  };
  auto addNorm = [&](const std::string &prefix, NormKind kind) {
    add(prefix + ".scale", {m});
    if (kind == NormKind::layer)
      add(prefix + ".bias", {m});
  };
  const AttentionSpec &a = blk.attention;
  add(p + "attn.wq", {m, a.heads * a.headDim});
  add(p + "attn.wk", {m, a.kvHeads * a.headDim});
  add(p + "attn.wv", {m, a.kvHeads * a.headDim});
  add(p + "attn.wo", {a.heads * a.headDim, m});
  if (a.qkvBias) {
    add(p + "attn.bq", {a.heads * a.headDim});
    add(p + "attn.bk", {a.kvHeads * a.headDim});
    add(p + "attn.bv", {a.kvHeads * a.headDim});
  }
  if (a.outBias)
    add(p + "attn.bo", {m});
  if (a.prenorm)
    addNorm(p + "attn_norm", *a.prenorm);
  std::optional<NormKind> ffnNorm =
      blk.moe ? blk.moe->prenorm : blk.densePrenorm;
  if (ffnNorm)
    addNorm(p + "moe_norm", *ffnNorm);
  auto addFfn = [&](const std::string &prefix, std::vector<int64_t> lead,
                    int64_t h, bool gated) {
    auto shape = [&](int64_t r, int64_t c) {
      std::vector<int64_t> s = lead;
      s.push_back(r);
      s.push_back(c);
      return s;
    };
    add(prefix + ".up", shape(m, h));
    if (gated)
      add(prefix + ".gate", shape(m, h));
    add(prefix + ".down", shape(h, m));
  };
  // Post-norms (BERT) each after its sublayer's parameters: data order,
  // the order the ONNX route finds them in.
  if (blk.postnorm)
    addNorm(p + "attn_postnorm", *blk.postnorm);
  auto addFfnPostnorm = [&] {
    if (blk.postnorm)
      addNorm(p + "ffn_postnorm", *blk.postnorm);
  };
  if (!blk.moe) {
    addFfn(p + "shared", {}, blk.denseHidden, blk.denseGated);
    addFfnPostnorm();
    return;
  }
  const MoeLayerSpec &moe = *blk.moe;
  if (moe.gate == GateKind::cosine) {
    add(p + "gate.proj", {m, kDefaultCosineDim});
    add(p + "gate.weight", {kDefaultCosineDim, moe.experts});
  } else {
    add(p + "gate.weight", {m, moe.experts});
  }
  if (moe.gate == GateKind::noisy_topk)
    add(p + "gate.noise", {m, moe.experts});
  addFfn(p + "experts", {moe.experts}, moe.hidden, moe.gated);
  if (moe.sharedHidden > 0)
    addFfn(p + "shared", {}, moe.sharedHidden, moe.gated);
  if (moe.sharedHidden > 0 && moe.sharedGate)
    add(p + "shared.out_gate", {m, 1});
  addFfnPostnorm();
}

} // namespace

llvm::StringRef mlir::moe::frontend::opSiteName(OpSite site) {
  switch (site) {
  case OpSite::embedding:
    return "moe.embedding";
  case OpSite::positions:
    return "moe.position_embedding";
  case OpSite::attention:
    return "moe.attention";
  case OpSite::attnResidual:
    return "arith.addf (attention residual)";
  case OpSite::attnPostNorm:
    return "moe.norm (attention post-norm)";
  case OpSite::ffnPostNorm:
    return "moe.norm (ffn post-norm)";
  case OpSite::ffnNorm:
    return "moe.norm";
  case OpSite::gate:
    return "moe.gate";
  case OpSite::dispatch:
    return "moe.dispatch";
  case OpSite::expert:
    return "moe.expert";
  case OpSite::combine:
    return "moe.combine";
  case OpSite::sharedExpert:
    return "moe.shared_expert";
  case OpSite::sharedGate:
    return "moe.sigmoid_gate (shared experts)";
  case OpSite::sharedAdd:
    return "arith.addf (shared experts)";
  case OpSite::ffnResidual:
    return "arith.addf (ffn residual)";
  case OpSite::finalNorm:
    return "moe.norm (final)";
  case OpSite::lmHead:
    return "moe.linear (LM head)";
  case OpSite::loss:
    return "moe.cross_entropy";
  }
  return "?";
}

OwningOpRef<ModuleOp> mlir::moe::frontend::buildModule(const ModelSpec &spec,
                                                       MLIRContext *ctx) {
  return ModuleBuilder(spec, ctx).build();
}

void mlir::moe::frontend::addDefaultParams(ModelSpec &spec) {
  std::vector<ParamSpec> wanted;
  wanted.push_back({"embed.table", {spec.vocab, spec.embed}, {}});
  if (spec.positions)
    wanted.push_back({"embed.positions", {spec.positions, spec.embed}, {}});
  for (auto [i, block] : llvm::enumerate(spec.blocks))
    appendBlockParams(spec, i, block, wanted);
  if (spec.finalNorm) {
    wanted.push_back({"final_norm.scale", {spec.embed}, {}});
    if (*spec.finalNorm == NormKind::layer)
      wanted.push_back({"final_norm.bias", {spec.embed}, {}});
  }
  wanted.push_back({"lm_head.weight", {spec.embed, spec.vocab}, {}});

  // Canonical order; an entry the frontend already has wins, and entries
  // the canonical list does not know stay, after it.
  std::vector<ParamSpec> merged;
  llvm::StringSet<> placed;
  for (ParamSpec &w : wanted) {
    auto it = llvm::find_if(
        spec.params, [&](const ParamSpec &p) { return p.name == w.name; });
    merged.push_back(it != spec.params.end() ? *it : std::move(w));
    placed.insert(merged.back().name);
  }
  for (const ParamSpec &p : spec.params)
    if (!placed.contains(p.name))
      merged.push_back(p);
  spec.params = std::move(merged);
}
