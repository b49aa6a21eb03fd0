//===- ContribAttention.cpp - fused attention ops -> AttentionSpec --------===//
//
// Recognises an attention sublayer written with one fused op:
//   com.microsoft MultiHeadAttention  (separate Q/K/V; `unidirectional`)
//   com.microsoft GroupQueryAttention (Q/K/V or packed QKV; kv_num_heads,
//                                      `causal`, rotary from cos/sin caches)
//   com.microsoft Attention           (one packed [M, 3D] weight input)
//   ai.onnx Attention, opset >= 23    (3-D Q/K/V; q_num_heads,
//                                      kv_num_heads, is_causal)
// around it: an optional pre-norm (matchNorm), Q/K/V from MatMuls of the
// normalised input with [M, D] initializers, and the output MatMul whose
// result is added back to the stream. Schemas: ONNX Runtime's
// docs/ContribOperators.md and ONNX's Operators.md (Attention-23).
//
// moe.attention is plain softmax(QK^T / sqrt(d)) V self-attention with
// optional causal mask and rotate-half rotary embeddings, so every input
// or attribute that changes that (KV cache, masks, biases, custom scale,
// softcap, sliding windows, interleaved rotary, ...) is refused by name.
//
//===----------------------------------------------------------------------===//

#include "ContribUtil.h"

#include "llvm/ADT/SmallPtrSet.h"

#include <cmath>

namespace mlir::moe::frontend {
using namespace contrib;

namespace {

enum class Kind { mha, gqa, msAttention, onnxAttention };

std::optional<Kind> attentionKind(const onnx::NodeProto &n) {
  if (isOp(n, "MultiHeadAttention", kMsDomain))
    return Kind::mha;
  if (isOp(n, "GroupQueryAttention", kMsDomain))
    return Kind::gqa;
  if (isOp(n, "Attention", kMsDomain))
    return Kind::msAttention;
  if (isOp(n, "Attention"))
    return Kind::onnxAttention;
  return std::nullopt;
}

/// The matcher's state for one sublayer.
struct AttentionMatch {
  const OnnxGraph &g;
  const Region &r;
  MatchTarget &t;
  const onnx::NodeProto &op;
  Kind kind;
  llvm::SmallPtrSet<const onnx::NodeProto *, 16> used;
  /// The normalised input the projections read.
  std::string x;
  int64_t embed = 0, heads = 0, kvHeads = 0, headDim = 0;
  bool causal = false, rotary = false;
  double rotaryBase = 10000.0;
  /// wq, wk, wv sources and their column counts.
  WeightSource wq, wk, wv;
  int64_t dq = 0, dk = 0, dv = 0;

  AttentionMatch(const OnnxGraph &g, const Region &r, MatchTarget &t,
                 const onnx::NodeProto &op, Kind kind)
      : g(g), r(r), t(t), op(op), kind(kind) {}

  std::string prefix() const { return "block" + std::to_string(t.blockIndex); }

  InFlightDiagnostic error() const { return g.error(op); }

  /// The three projections from separate MatMuls (inputs 0, 1, 2).
  LogicalResult separateQkv() {
    const char *roles[] = {"query", "key", "value"};
    WeightSource *srcs[] = {&wq, &wk, &wv};
    int64_t *cols[] = {&dq, &dk, &dv};
    for (int i = 0; i < 3; ++i) {
      if (input(op, i).empty()) {
        error() << "input '" << roles[i]
                << "' is absent; packed QKV is only supported for "
                   "GroupQueryAttention";
        return failure();
      }
      auto p = projectionOf(g, input(op, i), x, op, roles[i]);
      if (failed(p))
        return failure();
      if (i == 0)
        embed = p->rows;
      else if (p->rows != embed) {
        error() << "the " << roles[i] << " weight '" << p->weight << "' has "
                << p->rows << " rows but the query weight has " << embed;
        return failure();
      }
      *srcs[i] = wholeInitializer(g, p->weight, /*transpose=*/false);
      *cols[i] = p->cols;
      used.insert(p->node);
    }
    return success();
  }

  /// Q, K, V as column slices [dq | dk | dv] of one [M, dq+dk+dv] weight.
  void slicedQkv(const std::string &w, int64_t q, int64_t k, int64_t v) {
    WeightSource *srcs[] = {&wq, &wk, &wv};
    int64_t sizes[] = {q, k, v}, begin = 0;
    for (int i = 0; i < 3; ++i) {
      *srcs[i] = wholeInitializer(g, w, /*transpose=*/false);
      srcs[i]->sliceAxis = 1;
      srcs[i]->sliceBegin = begin;
      srcs[i]->sliceSize = sizes[i];
      begin += sizes[i];
    }
    dq = q;
    dk = k;
    dv = v;
  }

  LogicalResult requireHeads(llvm::StringRef headsAttr,
                             llvm::StringRef kvAttr) {
    heads = attrInt(op, headsAttr, 0);
    kvHeads = kvAttr.empty() ? heads : attrInt(op, kvAttr, 0);
    if (heads <= 0 || kvHeads <= 0) {
      error() << "attribute '" << (heads <= 0 ? headsAttr : kvAttr)
              << "' is required and must be positive";
      return failure();
    }
    return success();
  }

  /// heads * head_dim must be the query width, kv_heads * head_dim the key
  /// and value widths; heads a multiple of kv_heads (GQA).
  LogicalResult checkWidths() {
    if (dq % heads != 0) {
      error() << "query width " << dq << " is not a multiple of " << heads
              << " heads";
      return failure();
    }
    headDim = dq / heads;
    if (dk != kvHeads * headDim || dv != kvHeads * headDim) {
      error() << "key/value widths " << dk << "/" << dv << " are not "
              << kvHeads << " kv heads x head_dim " << headDim
              << " (different K/V head sizes are not supported)";
      return failure();
    }
    if (heads % kvHeads != 0) {
      error() << heads << " query heads are not a multiple of " << kvHeads
              << " kv heads";
      return failure();
    }
    return success();
  }

  /// `scale` must be the default 1/sqrt(head_dim) moe.attention uses.
  LogicalResult checkScale() {
    return requireFloatAttr(g, op, "scale", 1.0 / std::sqrt(double(headDim)),
                            "moe.attention scales scores by 1/sqrt(head_dim)");
  }

  LogicalResult mha() {
    if (failed(requireHeads("num_heads", "")) || failed(separateQkv()))
      return failure();
    causal = attrInt(op, "unidirectional", 0) != 0;
    const std::pair<int, const char *> inputs[] = {{4, "key_padding_mask"},
                                                   {5, "attention_bias"},
                                                   {6, "past_key"},
                                                   {7, "past_value"},
                                                   {8, "past_sequence_length"},
                                                   {9, "cache_indirection"}};
    if (failed(requireZeroOrAbsent(g, op, 3, "bias")))
      return failure();
    for (auto [i, name] : inputs)
      if (failed(requireAbsent(g, op, i, name,
                               "moe.attention has no masks, attention "
                               "bias or KV cache")))
        return failure();
    return success();
  }

  LogicalResult msAttention() {
    if (failed(requireHeads("num_heads", "")))
      return failure();
    llvm::StringRef w = input(op, 1);
    auto shape = g.shape(w);
    if (input(op, 0) != x) {
      error() << "input 'input' ('" << input(op, 0)
              << "') is not the sublayer's (normalised) input '" << x << "'";
      return failure();
    }
    if (w.empty() || !g.constant(w) || !shape || shape->size() != 2) {
      error() << "input 'weights' ('" << w
              << "') must be a 2-D initializer [M, 3D]";
      return failure();
    }
    embed = (*shape)[0];
    std::vector<int64_t> sizes = attrInts(op, "qkv_hidden_sizes");
    if (sizes.empty()) {
      if ((*shape)[1] % 3 != 0) {
        error() << "weights '" << w << "' width " << (*shape)[1]
                << " is not 3 x hidden (and no qkv_hidden_sizes)";
        return failure();
      }
      sizes.assign(3, (*shape)[1] / 3);
    }
    if (sizes.size() != 3 || sizes[0] + sizes[1] + sizes[2] != (*shape)[1]) {
      error() << "attribute 'qkv_hidden_sizes' does not add up to the width "
              << (*shape)[1] << " of weights '" << w << "'";
      return failure();
    }
    slicedQkv(w.str(), sizes[0], sizes[1], sizes[2]);
    causal = attrInt(op, "unidirectional", 0) != 0;
    if (failed(requireZeroOrAbsent(g, op, 2, "bias")) ||
        failed(requireIntAttr(g, op, "do_rotary", 0, 0,
                              "its built-in rotary is not modelled; use "
                              "GroupQueryAttention with cos/sin caches")))
      return failure();
    const std::pair<int, const char *> inputs[] = {{3, "mask_index"},
                                                   {4, "past"},
                                                   {5, "attention_bias"},
                                                   {6, "past_sequence_length"}};
    for (auto [i, name] : inputs)
      if (failed(requireAbsent(g, op, i, name,
                               "moe.attention has no masks, attention "
                               "bias or KV cache")))
        return failure();
    return success();
  }

  LogicalResult onnxAttention() {
    if (g.opset("") < 23) {
      error() << "ai.onnx Attention needs opset 23 or later; the model "
                 "imports opset "
              << g.opset("");
      return failure();
    }
    if (!hasAttr(op, "q_num_heads") || !hasAttr(op, "kv_num_heads")) {
      error() << "attributes 'q_num_heads' and 'kv_num_heads' are required: "
                 "only 3-D Q/K/V (B, N, heads*head_dim) straight from the "
                 "projections are supported, not 4-D inputs";
      return failure();
    }
    if (failed(requireHeads("q_num_heads", "kv_num_heads")) ||
        failed(separateQkv()))
      return failure();
    causal = attrInt(op, "is_causal", 0) != 0;
    const std::pair<int, const char *> inputs[] = {{3, "attn_mask"},
                                                   {4, "past_key"},
                                                   {5, "past_value"},
                                                   {6, "nonpad_kv_seqlen"}};
    for (auto [i, name] : inputs)
      if (failed(requireAbsent(g, op, i, name,
                               "moe.attention has no masks or KV cache")))
        return failure();
    if (failed(requireFloatAttr(g, op, "softcap", 0.0,
                                "moe.attention does not cap scores")))
      return failure();
    if (op.output_size() > 3 && !op.output(3).empty() &&
        !g.consumers(op.output(3)).empty()) {
      error() << "output 'qk_matmul_output' is used; moe.attention does not "
                 "produce the score matrix";
      return failure();
    }
    return success();
  }

  LogicalResult gqa() {
    if (failed(requireHeads("num_heads", "kv_num_heads")))
      return failure();
    if (input(op, 1).empty() && input(op, 2).empty()) {
      // Packed QKV: one MatMul whose columns are [Q | K | V].
      auto p = projectionOf(g, input(op, 0), x, op, "query (packed QKV)");
      if (failed(p))
        return failure();
      int64_t per = heads + 2 * kvHeads;
      if (p->cols % per != 0) {
        error() << "packed QKV width " << p->cols << " is not (num_heads + 2 "
                << "x kv_num_heads) = " << per << " x head_dim";
        return failure();
      }
      int64_t d = p->cols / per;
      embed = p->rows;
      slicedQkv(p->weight, heads * d, kvHeads * d, kvHeads * d);
      used.insert(p->node);
    } else if (failed(separateQkv())) {
      return failure();
    }
    // Older schemas had no `causal` (always causal); the default is 1.
    causal = attrInt(op, "causal", 1) != 0;
    const std::pair<int, const char *> inputs[] = {
        {3, "past_key"},        {4, "past_value"},     {9, "position_ids"},
        {10, "attention_bias"}, {11, "head_sink"},     {12, "k_scale"},
        {13, "v_scale"},        {14, "q_norm_weight"}, {15, "k_norm_weight"}};
    for (auto [i, name] : inputs)
      if (failed(requireAbsent(g, op, i, name,
                               "moe.attention has no KV cache, position "
                               "ids, attention bias, sinks or Q/K norms")))
        return failure();
    if (failed(requireIntAttr(g, op, "local_window_size", -1, -1,
                              "sliding-window attention is not modelled")) ||
        failed(requireFloatAttr(g, op, "softcap", 0.0,
                                "moe.attention does not cap scores")) ||
        failed(requireIntAttr(g, op, "smooth_softmax", 0, 0,
                              "moe.attention uses a plain softmax")) ||
        failed(requireIntAttr(g, op, "qk_output", 0, 0,
                              "moe.attention does not output scores")))
      return failure();
    if (failed(sequenceLengths()))
      return failure();
    rotary = attrInt(op, "do_rotary", 0) != 0;
    if (rotary) {
      if (failed(requireIntAttr(g, op, "rotary_interleaved", 0, 0,
                                "moe.attention rotates halves (GPT-NeoX / "
                                "LLaMA), not interleaved pairs")))
        return failure();
    }
    return success();
  }

  /// seqlens_k (#5) and total_sequence_length (#6) describe the KV cache
  /// and padding; a training step has neither, so when they are constants
  /// they must say "every sequence is full length".
  LogicalResult sequenceLengths() {
    auto lens = g.intValues(input(op, 5));
    auto total = g.intValues(input(op, 6));
    if (!lens || !total || total->size() != 1)
      return success(); // computed at run time: assumed unpadded
    for (int64_t l : *lens)
      if (l != (*total)[0] - 1) {
        error() << "input 'seqlens_k' ('" << input(op, 5) << "') holds " << l
                << " but total_sequence_length is " << (*total)[0]
                << "; padded sequences are not supported";
        return failure();
      }
    auto qs = g.shape(input(op, 0));
    if (qs && qs->size() == 3 && (*qs)[1] > 0 && (*qs)[1] != (*total)[0]) {
      error() << "input 'total_sequence_length' is " << (*total)[0]
              << " but the query has " << (*qs)[1]
              << " tokens; a KV cache (past tokens) is not supported";
      return failure();
    }
    return success();
  }

  /// Derives the rotary base from the cos/sin caches (#7, #8) and checks
  /// they are the standard table cos/sin(pos * base^(-2i/head_dim)).
  LogicalResult rotaryTables() {
    llvm::StringRef cosName = input(op, 7), sinName = input(op, 8);
    if (cosName.empty() || sinName.empty()) {
      error() << "do_rotary=1 needs inputs 'cos_cache' and 'sin_cache'";
      return failure();
    }
    auto cs = g.shape(cosName), ss = g.shape(sinName);
    auto cv = g.floatValues(cosName), sv = g.floatValues(sinName);
    if (!cs || !ss || cs->size() != 2 || *cs != *ss || !cv || !sv) {
      error() << "inputs 'cos_cache'/'sin_cache' must be 2-D constants of "
                 "the same shape with their data present";
      return failure();
    }
    int64_t rows = (*cs)[0], half = (*cs)[1];
    if (2 * half != headDim) {
      error() << "input 'cos_cache' has " << half
              << " columns; only full rotary (head_dim / 2 = " << headDim / 2
              << ") is supported";
      return failure();
    }
    if (rows < 2) {
      error() << "input 'cos_cache' has " << rows
              << " rows; the rotary base cannot be read from it";
      return failure();
    }
    // Position 1 holds angle theta_i = base^(-2i/d) (< pi, so atan2 is
    // exact); theta_1 gives the base, and every entry is then checked.
    if (half >= 2) {
      double theta1 = std::atan2((*sv)[half + 1], (*cv)[half + 1]);
      if (theta1 > 0 && theta1 < 1)
        rotaryBase = std::exp(-std::log(theta1) * double(headDim) / 2.0);
    }
    // A float32 table gives the base to ~1e-5 only; snap to the usual
    // 10000 (what moe.attention computes) when it is that one.
    if (std::fabs(rotaryBase - 10000.0) <= 1e-3 * 10000.0)
      rotaryBase = 10000.0;
    for (int64_t p = 0; p < rows; ++p)
      for (int64_t i = 0; i < half; ++i) {
        double angle = double(p) * std::pow(rotaryBase, -2.0 * i / headDim);
        if (std::fabs((*cv)[p * half + i] - std::cos(angle)) > 1e-3 ||
            std::fabs((*sv)[p * half + i] - std::sin(angle)) > 1e-3) {
          error() << "inputs 'cos_cache'/'sin_cache' are not a standard "
                     "rotary table cos/sin(pos * base^(-2i/head_dim)) "
                     "(entry ["
                  << p << ", " << i << "] differs for base " << rotaryBase
                  << ")";
          return failure();
        }
      }
    return success();
  }

  /// The output projection: the op's output times an [heads*head_dim, M]
  /// initializer, whose result is what the sublayer adds back.
  FailureOr<std::string> outputProjection() {
    const std::string &y = op.output(0);
    const onnx::NodeProto *mm = nullptr;
    for (const onnx::NodeProto *c : g.consumers(y))
      if (isOp(*c, "MatMul") && c->input(0) == y)
        mm = c;
    auto shape = mm ? g.shape(mm->input(1)) : std::nullopt;
    if (!mm || mm->output(0) != r.output || !g.constant(mm->input(1)) ||
        !shape || shape->size() != 2) {
      error() << "its output must go through one MatMul with a 2-D weight "
                 "initializer (the output projection) straight into the "
                 "residual add";
      return failure();
    }
    if ((*shape)[0] != heads * headDim || (*shape)[1] != embed) {
      error() << "output projection weight '" << mm->input(1) << "' is ["
              << (*shape)[0] << ", " << (*shape)[1] << "], expected ["
              << heads * headDim << ", " << embed << "]";
      return failure();
    }
    used.insert(mm);
    return std::string(mm->input(1));
  }

  FailureOr<bool> run() {
    used.insert(&op);
    NormMatch norm;
    std::vector<ParamSpec> normParams;
    FailureOr<bool> normed =
        matchNorm(g, r.input, prefix() + ".attn_norm", normParams, norm);
    if (failed(normed))
      return failure();
    x = *normed ? norm.output : r.input;
    if (*normed)
      used.insert(norm.nodes.begin(), norm.nodes.end());

    LogicalResult ok = kind == Kind::mha           ? mha()
                       : kind == Kind::gqa         ? gqa()
                       : kind == Kind::msAttention ? msAttention()
                                                   : onnxAttention();
    if (failed(ok) || failed(checkWidths()) || failed(checkScale()))
      return failure();
    if (rotary && failed(rotaryTables()))
      return failure();
    FailureOr<std::string> wo = outputProjection();
    if (failed(wo) ||
        failed(requireAllUsed(g, r, used, op, "attention sublayer")))
      return failure();

    AttentionSpec &a = t.block.attention;
    a.loc = g.loc(op);
    a.heads = heads;
    a.kvHeads = kvHeads;
    a.headDim = headDim;
    a.causal = causal;
    a.rotary = rotary;
    a.rotaryBase = rotaryBase;
    a.prenorm = *normed ? std::optional<NormKind>(norm.kind) : std::nullopt;
    if (*normed)
      a.epsilon = norm.epsilon;

    std::string p = prefix() + ".attn.";
    t.params.insert(t.params.end(), normParams.begin(), normParams.end());
    t.params.push_back({p + "wq", {embed, dq}, wq});
    t.params.push_back({p + "wk", {embed, dk}, wk});
    t.params.push_back({p + "wv", {embed, dv}, wv});
    t.params.push_back({p + "wo",
                        {heads * headDim, embed},
                        wholeInitializer(g, *wo, /*transpose=*/false)});
    for (const onnx::NodeProto *n : used)
      t.claims.add(n, OpSite::attention);
    return true;
  }
};

} // namespace

FailureOr<bool> matchContribAttention(const OnnxGraph &g, const Region &r,
                                      MatchTarget &t) {
  FailureOr<const onnx::NodeProto *> op = uniqueNode(
      g, r,
      [](const onnx::NodeProto &n) { return attentionKind(n).has_value(); },
      "attention op");
  if (failed(op))
    return failure();
  if (!*op)
    return false;
  AttentionMatch m(g, r, t, **op, *attentionKind(**op));
  return m.run();
}

} // namespace mlir::moe::frontend
