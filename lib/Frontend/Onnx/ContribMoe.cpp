//===- ContribMoe.cpp - com.microsoft MoE -> MoeLayerSpec -----------------===//
//
// Recognises an MoE sublayer written with ONNX Runtime's fused MoE op:
//
//   [norm] -> (Reshape to [T, M]) -> MatMul(router [M, E]) -> (Reshape)
//   (or Gemm(router [E, M], transB=1), as nn.Linear on 2-D tokens exports)
//          -> MoE(input, router_probs, fc1, -, fc2, -, [fc3]) -> (Reshape)
//
// Layouts (docs/ContribOperators.md, com.microsoft.MoE): router_probs are
// the router's logits [T, E] (the op applies softmax, top-k and, with
// normalize_routing_weights, renormalises the k kept weights);
// fc1_experts_weights [E, inter, hidden] (2*inter when a fused SwiGLU),
// fc2_experts_weights [E, hidden, inter], fc3_experts_weights [E, inter,
// hidden], i.e. PyTorch Linear's out x in per expert. moe.expert wants
// up/gate [E, M, H] and down [E, H, M], so all three are transposed.
//
// With fc3 (Mixtral's w3), the expert is act(x fc1^T) * (x fc3^T): fc1 is
// the gate projection, fc3 the up projection; activation_type=swiglu with
// swiglu_fusion=0, alpha 1 and beta 0 is the same SiLU-gated expert.
// The op has no capacity: it is dropless.
//
// Refused, by name: QMoE (quantised, packed weights), use_sparse_mixer,
// identity activation, fused SwiGLU layouts (their halves' order differs
// between ONNX Runtime's docs and kernels), SwiGLU alpha/beta/limit other
// than plain SiLU gating, non-zero biases, a Softmax before router_probs.
//
//===----------------------------------------------------------------------===//

#include "ContribUtil.h"

#include "llvm/ADT/SmallPtrSet.h"

namespace mlir::moe::frontend {
using namespace contrib;

namespace {

struct MoeMatch {
  const OnnxGraph &g;
  const Region &r;
  MatchTarget &t;
  const onnx::NodeProto &op;
  llvm::SmallPtrSet<const onnx::NodeProto *, 16> used;
  std::string x;    // the normalised sublayer input
  std::string flat; // x reshaped to [T, M], or empty
  int64_t embed = 0, experts = 0, hidden = 0, topK = 1;
  Activation activation = Activation::relu;
  bool gated = false, normalize = false;
  /// The router weight is stored [E, M] (Gemm with transB=1).
  bool routerTransposed = false;
  std::string router, fc1, fc2, fc3;

  MoeMatch(const OnnxGraph &g, const Region &r, MatchTarget &t,
           const onnx::NodeProto &op)
      : g(g), r(r), t(t), op(op) {}

  InFlightDiagnostic error() const { return g.error(op); }
  std::string prefix() const { return "block" + std::to_string(t.blockIndex); }

  /// `v` is x, or a Reshape of x in this region (recorded as used).
  bool isInput(llvm::StringRef v) {
    if (v == x)
      return true;
    const onnx::NodeProto *p = g.producer(v);
    if (p && isOp(*p, "Reshape") && p->input(0) == x) {
      used.insert(p);
      flat = v.str();
      return true;
    }
    return false;
  }

  /// router_probs: MatMul(x or its Reshape, [M, E] initializer), possibly
  /// reshaped to 2-D afterwards.
  LogicalResult matchRouter() {
    llvm::StringRef v = input(op, 1);
    const onnx::NodeProto *p = g.producer(v);
    if (p && isOp(*p, "Reshape")) {
      used.insert(p);
      v = p->input(0);
      p = g.producer(v);
    }
    if (p && (isOp(*p, "Softmax") || isOp(*p, "Sigmoid"))) {
      error() << "input 'router_probs' comes from " << p->op_type() << " '"
              << g.nodeName(*p)
              << "'; the MoE op applies softmax to router_probs itself, so "
                 "they must be the router's logits";
      return failure();
    }
    // nn.Linear on 2-D tokens exports as Gemm(x, W[E, M], transB=1).
    bool gemm = p && isOp(*p, "Gemm");
    if (!p || !(isOp(*p, "MatMul") || gemm) || !isInput(p->input(0))) {
      error() << "input 'router_probs' ('" << input(op, 1)
              << "') must be a MatMul (or Gemm) of the sublayer's "
                 "(normalised) input with a router weight initializer";
      return failure();
    }
    bool transB = gemm && attrInt(*p, "transB", 0) != 0;
    if (gemm) {
      if (attrInt(*p, "transA", 0) != 0 ||
          failed(requireFloatAttr(g, *p, "alpha", 1.0,
                                  "the router is a plain projection")) ||
          failed(requireZeroOrAbsent(g, *p, 2, "C")))
        return failure();
    }
    auto shape = g.shape(p->input(1));
    if (!g.constant(p->input(1)) || !shape || shape->size() != 2) {
      error() << "the router weight '" << p->input(1)
              << "' is not a 2-D initializer";
      return failure();
    }
    used.insert(p);
    router = p->input(1);
    routerTransposed = transB;
    embed = (*shape)[transB ? 1 : 0];
    experts = (*shape)[transB ? 0 : 1];
    return success();
  }

  /// An expert weight input: a 3-D initializer; its shape.
  FailureOr<std::vector<int64_t>> expertWeight(int i, llvm::StringRef name) {
    llvm::StringRef v = input(op, i);
    auto shape = g.shape(v);
    if (v.empty() || !g.constant(v) || !shape || shape->size() != 3) {
      error() << "input '" << name << "' ('" << v
              << "') must be a 3-D initializer [num_experts, ., .]";
      return failure();
    }
    if ((*shape)[0] != experts) {
      error() << "input '" << name << "' has " << (*shape)[0]
              << " experts but the router weight '" << router << "' has "
              << experts;
      return failure();
    }
    return *shape;
  }

  LogicalResult matchExperts() {
    auto s1 = expertWeight(2, "fc1_experts_weights");
    auto s2 = expertWeight(4, "fc2_experts_weights");
    if (failed(s1) || failed(s2))
      return failure();
    fc1 = input(op, 2).str();
    fc2 = input(op, 4).str();
    // fc1 is [E, inter, hidden]; an [E, hidden, inter] one (hidden !=
    // inter) is the older layout some exporters wrote: refuse it rather
    // than guess which one the data follows.
    if ((*s1)[2] != embed) {
      error() << "input 'fc1_experts_weights' is [" << (*s1)[0] << ", "
              << (*s1)[1] << ", " << (*s1)[2]
              << "]; the MoE schema's layout is [num_experts, inter_size, "
                 "hidden_size] with hidden_size "
              << embed << " (the router's input width)";
      return failure();
    }
    hidden = (*s1)[1];
    if ((*s2)[1] != embed || (*s2)[2] != hidden) {
      error() << "input 'fc2_experts_weights' is [" << (*s2)[0] << ", "
              << (*s2)[1] << ", " << (*s2)[2] << "], expected [" << experts
              << ", " << embed << ", " << hidden
              << "] (num_experts, hidden_size, inter_size)";
      return failure();
    }
    if (!input(op, 6).empty()) {
      auto s3 = expertWeight(6, "fc3_experts_weights");
      if (failed(s3))
        return failure();
      if ((*s3)[1] != hidden || (*s3)[2] != embed) {
        error() << "input 'fc3_experts_weights' is [" << (*s3)[0] << ", "
                << (*s3)[1] << ", " << (*s3)[2] << "], expected [" << experts
                << ", " << hidden << ", " << embed
                << "] (num_experts, inter_size, hidden_size)";
        return failure();
      }
      fc3 = input(op, 6).str();
      gated = true;
    }
    const std::pair<int, const char *> biases[] = {{3, "fc1_experts_bias"},
                                                   {5, "fc2_experts_bias"},
                                                   {7, "fc3_experts_bias"}};
    for (auto [i, name] : biases)
      if (failed(requireZeroOrAbsent(g, op, i, name)))
        return failure();
    return success();
  }

  LogicalResult matchAttributes() {
    topK = attrInt(op, "k", 1);
    if (topK < 1 || topK > experts) {
      error() << "attribute 'k' = " << topK << " is not in [1, " << experts
              << "] (the number of experts)";
      return failure();
    }
    normalize = attrInt(op, "normalize_routing_weights", 0) != 0;
    if (failed(requireIntAttr(g, op, "use_sparse_mixer", 0, 0,
                              "moe.gate is a softmax top-k router, not "
                              "SparseMixer")))
      return failure();
    std::string act = attrString(op, "activation_type", "relu");
    if (act == "relu" || act == "gelu" || act == "silu") {
      activation = act == "relu"   ? Activation::relu
                   : act == "gelu" ? Activation::gelu
                                   : Activation::silu;
      return success();
    }
    if (act == "swiglu") {
      if (!gated) {
        error() << "activation_type 'swiglu' with swiglu_fusion=0 needs "
                   "input 'fc3_experts_weights' (the linear half)";
        return failure();
      }
      if (failed(requireFloatAttr(g, op, "activation_alpha", 1.0,
                                  "moe.expert's gated SiLU is g*sigmoid(g), "
                                  "alpha 1")) ||
          failed(requireFloatAttr(g, op, "activation_beta", 0.0,
                                  "moe.expert's gated SiLU multiplies by the "
                                  "linear half itself, beta 0")))
        return failure();
      if (hasAttr(op, "swiglu_limit")) {
        error() << "attribute 'swiglu_limit' = "
                << formatFloat(attrFloat(op, "swiglu_limit", 0))
                << " is not supported: moe.expert does not clamp";
        return failure();
      }
      activation = Activation::silu;
      return success();
    }
    error() << "attribute 'activation_type' = '" << act
            << "' is not supported (relu, gelu, silu or swiglu)";
    return failure();
  }

  /// The op's output (or its Reshape back to [B, N, M]) is what the
  /// sublayer adds to the stream.
  LogicalResult matchOutput() {
    const std::string &y = op.output(0);
    if (y == r.output)
      return success();
    for (const onnx::NodeProto *c : g.consumers(y))
      if (isOp(*c, "Reshape") && c->input(0) == y && c->output(0) == r.output) {
        used.insert(c);
        return success();
      }
    error() << "its output must be added to the residual stream directly "
               "(or through one Reshape)";
    return failure();
  }

  FailureOr<bool> run() {
    used.insert(&op);
    NormMatch norm;
    std::vector<ParamSpec> normParams;
    FailureOr<bool> normed =
        matchNorm(g, r.input, prefix() + ".moe_norm", normParams, norm);
    if (failed(normed))
      return failure();
    x = *normed ? norm.output : r.input;
    if (*normed)
      used.insert(norm.nodes.begin(), norm.nodes.end());
    if (!isInput(input(op, 0))) {
      error() << "input 'input' ('" << input(op, 0)
              << "') is not the sublayer's (normalised) input '" << x
              << "' or a Reshape of it";
      return failure();
    }
    // A fused SwiGLU changes fc1's shape, so refuse it before the shapes
    // are checked (the message then names the real reason).
    if (attrString(op, "activation_type", "relu") == "swiglu" &&
        failed(requireIntAttr(g, op, "swiglu_fusion", 0, 0,
                              "fused gate/linear halves in fc1 are not "
                              "supported (their order differs between ONNX "
                              "Runtime's docs and kernels); export fc1 "
                              "(gate) and fc3 (linear) separately")))
      return failure();
    if (failed(matchRouter()) || failed(matchExperts()) ||
        failed(matchAttributes()) || failed(matchOutput()) ||
        failed(requireAllUsed(g, r, used, op, "MoE sublayer")))
      return failure();

    MoeLayerSpec &m = t.block.moe.emplace(g.loc(op));
    m.gate = GateKind::softmax_topk;
    m.experts = experts;
    m.topK = topK;
    m.capacityFactor = std::nullopt; // the fused op never drops tokens
    m.normalize = normalize;
    m.activation = activation;
    m.gated = gated;
    m.hidden = hidden;
    m.prenorm = *normed ? std::optional<NormKind>(norm.kind) : std::nullopt;
    if (*normed)
      m.epsilon = norm.epsilon;

    std::string p = prefix();
    t.params.insert(t.params.end(), normParams.begin(), normParams.end());
    t.params.push_back({p + ".gate.weight",
                        {embed, experts},
                        wholeInitializer(g, router, routerTransposed)});
    // With fc3, fc1 is the gate projection (the activation's input) and
    // fc3 the up projection; without it, fc1 is up.
    t.params.push_back({p + ".experts.up",
                        {experts, embed, hidden},
                        wholeInitializer(g, gated ? fc3 : fc1, true)});
    if (gated)
      t.params.push_back({p + ".experts.gate",
                          {experts, embed, hidden},
                          wholeInitializer(g, fc1, true)});
    t.params.push_back({p + ".experts.down",
                        {experts, hidden, embed},
                        wholeInitializer(g, fc2, true)});
    // The fused op is the whole routed layer: gate, dispatch, experts and
    // combine all compute it.
    for (const onnx::NodeProto *n : used) {
      if (n == &op) {
        for (OpSite s : {OpSite::gate, OpSite::dispatch, OpSite::expert,
                         OpSite::combine})
          t.claims.add(n, s);
      } else if (*normed && llvm::is_contained(norm.nodes, n)) {
        t.claims.add(n, OpSite::ffnNorm);
      } else {
        t.claims.add(n, n->op_type() == "MatMul" ? OpSite::gate
                                                 : OpSite::dispatch);
      }
    }
    return true;
  }
};

} // namespace

FailureOr<bool> matchContribMoe(const OnnxGraph &g, const Region &r,
                                MatchTarget &t) {
  FailureOr<const onnx::NodeProto *> op = uniqueNode(
      g, r,
      [](const onnx::NodeProto &n) {
        return isOp(n, "MoE", kMsDomain) || isOp(n, "QMoE", kMsDomain);
      },
      "MoE op");
  if (failed(op))
    return failure();
  if (!*op)
    return false;
  if (isOp(**op, "QMoE", kMsDomain)) {
    g.error(**op) << "QMoE (quantised experts, expert_weight_bits = "
                  << attrInt(**op, "expert_weight_bits", 0)
                  << ") is not supported: its packed int4/int8 weights and "
                     "scales cannot be described as moe.source weights; "
                     "export the float MoE op instead";
    return failure();
  }
  MoeMatch m(g, r, t, **op);
  return m.run();
}

} // namespace mlir::moe::frontend
