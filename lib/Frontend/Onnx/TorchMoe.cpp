//===- TorchMoe.cpp - routed MoE layers as torch.onnx.export writes them --===//
//
// One matcher for the PyTorch MoE styles (Mixtral/HF expert loops, GShard /
// Tutel einsum dispatch with capacity, Switch top-1 with dropping, DeepSeek
// shared + routed experts). They differ in how tokens reach the experts;
// they agree on what the importer needs, so the matcher reads that by data
// flow (TorchMatch.h) rather than by node sequence:
//   - the selection (TopK, or ArgMax for top-1 / repeated argmax) and the
//     router scores behind it (Softmax or Sigmoid over a weight MatMul),
//   - renormalisation (a Div of the kept weights by their ReduceSum),
//   - the weight projections downstream of the router (routed experts) and
//     those that are not (shared experts), grouped into FFNs,
//   - a capacity: a constant compared with CumSum positions.
//
//===----------------------------------------------------------------------===//
#include "TorchMatch.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <map>
#include <set>

namespace mlir::moe::frontend {

using namespace torchpat;
using onnx::NodeProto;

namespace {

/// The nearest constant expert index selecting this expert's tokens: a
/// Gather with a scalar constant index (mask[e], dispatched[e]) or an Equal
/// against a constant (sel == e). nullopt when none.
std::optional<int64_t> expertIndex(const RegionView &rv,
                                   llvm::StringRef tokens) {
  const OnnxGraph &g = rv.graph();
  for (const NodeProto *n : rv.backwardNodes(tokens)) {
    if (n->op_type() == "Gather" && n->input_size() == 2) {
      const NodeProto *d = g.producer(n->input(0));
      if (d && d->op_type() == "Shape")
        continue;
      auto idx = g.intValues(n->input(1));
      auto shape = g.shape(n->input(1));
      if (idx && idx->size() == 1 && (!shape || shape->empty()))
        return (*idx)[0];
    } else if (n->op_type() == "Equal" && n->input_size() == 2) {
      for (int i = 0; i < 2; ++i)
        if (auto v = g.intValues(n->input(i)); v && v->size() == 1)
          return (*v)[0];
    }
  }
  return std::nullopt;
}

/// The sum of constant offsets (Add / Sub of scalars) on the way from
/// `value` back to `target`; other operations (the mask Mul, adding the
/// previous choice's counts) keep the kept positions' values.
std::optional<double> offsetFrom(const RegionView &rv, std::string value,
                                 const NodeProto *target) {
  const OnnxGraph &g = rv.graph();
  double off = 0;
  for (int hop = 0; hop < 64; ++hop) {
    const NodeProto *p = rv.prod(value);
    if (!p)
      return std::nullopt;
    if (p == target)
      return off;
    static const llvm::StringSet<> through = {
        "Add", "Sub", "Mul", "Cast", "Identity", "Reshape", "Unsqueeze",
        "Squeeze", "Flatten"};
    if (!through.contains(p->op_type()))
      return std::nullopt; // not a position (e.g. the capacity mask itself)
    std::string next;
    for (const std::string &i : p->input())
      if (!i.empty() && next.empty() &&
          (rv.prod(i) == target ||
           llvm::is_contained(rv.backwardNodes(i), target)))
        next = i;
    if (next.empty())
      return std::nullopt;
    if ((p->op_type() == "Add" || p->op_type() == "Sub") &&
        p->input_size() == 2) {
      int other = p->input(0) == next ? 1 : 0;
      if (auto c = scalarConst(g, p->input(other))) {
        if (p->op_type() == "Add")
          off += *c;
        else if (other == 1)
          off -= *c;
        else
          return std::nullopt; // c - pos reverses the order
      }
    }
    value = next;
  }
  return std::nullopt;
}

/// [B, N, M] of the stream: its static shape, else B and N from the
/// rank-2 graph input (the token ids) it is computed from.
std::optional<std::vector<int64_t>> tokenShape(const OnnxGraph &g,
                                               llvm::StringRef stream) {
  auto s = g.shape(stream);
  if (s && s->size() == 3 && (*s)[0] > 0 && (*s)[1] > 0)
    return s;
  std::vector<std::string> work{stream.str()};
  std::set<std::string> seen;
  while (!work.empty()) {
    std::string v = work.back();
    work.pop_back();
    if (!seen.insert(v).second)
      continue;
    const NodeProto *p = g.producer(v);
    if (!p) {
      if (g.isInitializer(v) || g.constant(v))
        continue;
      auto in = g.shape(v);
      if (in && in->size() == 2 && (*in)[0] > 0 && (*in)[1] > 0)
        return std::vector<int64_t>{(*in)[0], (*in)[1], -1};
      continue;
    }
    for (const std::string &i : p->input())
      if (!i.empty())
        work.push_back(i);
  }
  return std::nullopt;
}

} // namespace

namespace {

/// The MoE sublayer as the matcher sees it, filled role by role.
struct MoeCtx {
  const OnnxGraph &g;
  const Region &r;
  RegionView rv;
  MatchTarget &t;
  std::vector<const NodeProto *> topks, argmaxes;
  const NodeProto *sel = nullptr, *scoresNode = nullptr, *routerNode = nullptr;
  std::optional<WeightUse> router;
  bool logitsTopK = false;
  MoeLayerSpec spec;
  std::vector<FfnMatch> ffns, shared;
  std::optional<WeightUse> sharedGate;
  MoeCtx(const OnnxGraph &g, const Region &r, MatchTarget &t)
      : g(g), r(r), rv(g, r), t(t), spec(UnknownLoc::get(g.context())) {}
  int64_t experts() const { return router->shape[1]; }
};

/// The router behind the selection (every style): the Softmax / Sigmoid
/// scores and the weight MatMul behind them. TopK over raw logits followed
/// by a Softmax of the kept values (Mixtral as some code bases write it) is
/// the same gate as softmax -> top-k -> renormalise.
LogicalResult findRouter(MoeCtx &c) {
  const OnnxGraph &g = c.g;
  for (const NodeProto *n : c.rv.backwardNodes(c.sel->input(0))) {
    if (!c.scoresNode &&
        (n->op_type() == "Softmax" || n->op_type() == "Sigmoid"))
      c.scoresNode = n;
    if (auto w = weightUse(g, *n); w && w->shape.size() == 2) {
      c.routerNode = n;
      c.router = *w;
      break;
    }
  }
  if (!c.routerNode) {
    g.error(*c.sel) << "expert selection is not computed from a router "
                       "projection (a MatMul with an M x E weight)";
    return failure();
  }
  if (!c.scoresNode && !c.topks.empty())
    for (const NodeProto *u : c.rv.users(c.sel->output(0)))
      if (u->op_type() == "Softmax") {
        c.scoresNode = u;
        c.logitsTopK = true;
      }
  if (!c.scoresNode) {
    g.error(*c.sel) << "router scores are neither a Softmax nor a Sigmoid of "
                       "the router logits";
    return failure();
  }
  c.spec.loc = g.loc(*c.sel);
  c.spec.experts = c.experts();
  c.spec.gate = c.scoresNode->op_type() == "Sigmoid" ? GateKind::sigmoid
                                                     : GateKind::softmax_topk;
  if (c.scoresNode->op_type() == "Softmax") {
    int64_t axis = attrInt(*c.scoresNode, "axis", g.opset() >= 13 ? -1 : 1);
    auto s = g.shape(c.scoresNode->input(0));
    if (!s)
      s = g.shape(c.router->data); // MatMul keeps its input's rank
    if (axis != -1 && s && axis != static_cast<int64_t>(s->size()) - 1) {
      g.error(*c.scoresNode) << "router softmax is over axis " << axis
                             << ", not over the experts";
      return failure();
    }
  }
  return success();
}

/// k: TopK's constant K (Mixtral, GShard, DeepSeek), or one ArgMax
/// (Switch's torch.max: top-1). GShard's original top-2 by repeated
/// ArgMax renormalises the two gates in ways this matcher does not trace:
/// refused rather than imported as un-normalised top-2.
LogicalResult readTopK(MoeCtx &c) {
  const OnnxGraph &g = c.g;
  if (!c.topks.empty()) {
    if (c.topks.size() > 1 || !c.argmaxes.empty()) {
      g.error(*c.topks.back()) << "several expert selections (TopK / ArgMax) "
                                  "in one MoE sublayer";
      return failure();
    }
    auto kv = evalInts(g, c.sel->input(1));
    if (!kv || kv->size() != 1 || (*kv)[0] < 1 || (*kv)[0] > c.experts()) {
      g.error(*c.sel) << "TopK's K is not a constant in [1, " << c.experts()
                      << "]";
      return failure();
    }
    c.spec.topK = (*kv)[0];
    if (!attrInt(*c.sel, "largest", 1)) {
      g.error(*c.sel) << "TopK selects the smallest scores";
      return failure();
    }
    return success();
  }
  if (c.argmaxes.size() > 1) {
    g.error(*c.argmaxes[1]) << "top-" << c.argmaxes.size()
                            << " by repeated ArgMax is not supported; export "
                               "the selection with torch.topk";
    return failure();
  }
  c.spec.topK = 1;
  return success();
}

/// Renormalisation (Mixtral's w / w.sum()): a Div of the kept weights by a
/// ReduceSum of them, or by their ReduceL1 (DBRX's moe_normalize_expert_
/// weights = 1, torch.norm(w, p=1)): the kept weights are softmax
/// probabilities, positive, so their L1 norm is their sum, and so is its
/// gradient (sign(w) = 1). Another p-norm (ReduceL2, Pow / ReduceSum) is
/// refused by name. Sigmoid scores renormalised so (DeepSeek-V3) have no
/// moe.gate equivalent: refused at the Div.
LogicalResult readNormalize(MoeCtx &c) {
  const NodeProto *normDiv = nullptr;
  if (c.logitsTopK) {
    c.spec.normalize = true;
  } else if (!c.topks.empty()) {
    auto kept = c.rv.forwardCone({c.sel->output(0)});
    for (const NodeProto *d : c.rv.ofType("Div")) {
      if (!kept.count(d->input(0)))
        continue;
      for (const NodeProto *n : c.rv.backwardNodes(d->input(1))) {
        llvm::StringRef op = n->op_type();
        if (n->input_size() < 1 || !kept.count(n->input(0)))
          continue;
        if (op == "ReduceL2" || op == "ReduceLogSum" || op == "Pow" ||
            op == "ReduceSumSquare" || op == "ReduceLogSumExp") {
          c.g.error(*n) << "renormalises the top-" << c.spec.topK
                        << " routing weights by another norm than their sum ("
                        << op << "; DBRX's moe_normalize_expert_weights "
                        << "other than 1?): moe.gate's normalize divides by "
                           "their sum (p = 1) only";
          return failure();
        }
        if (op == "ReduceSum" || op == "ReduceL1") {
          c.spec.normalize = true;
          normDiv = d;
        }
      }
    }
  }
  if (c.spec.normalize && c.spec.gate == GateKind::sigmoid) {
    c.g.error(normDiv ? *normDiv : *c.sel)
        << "sigmoid router scores renormalised over the top-" << c.spec.topK
        << " (DeepSeek-V3 style) are not supported: moe.gate's sigmoid kind "
           "scales by the raw sigmoid, and normalize applies to softmax gates "
           "only";
    return failure();
  }
  return success();
}

/// Per-expert FFNs in expert order: by the constant index selecting each
/// expert's tokens (`mask[e]`, `sel == e`, `dispatched[e]`) when every
/// expert has a distinct one, else graph order (torch's Python loop order:
/// Mixtral, Switch, DeepSeek). All experts must agree in shape,
/// activation and layout.
LogicalResult orderExperts(MoeCtx &c) {
  std::vector<FfnMatch> &ffns = c.ffns;
  if (static_cast<int64_t>(ffns.size()) != c.experts()) {
    c.g.error(*c.sel) << "the router chooses among " << c.experts()
                      << " experts but " << ffns.size()
                      << " expert FFNs were found";
    return failure();
  }
  std::vector<std::pair<int64_t, size_t>> order;
  std::set<int64_t> seen;
  for (size_t i = 0; i < ffns.size(); ++i) {
    auto e = expertIndex(c.rv, ffns[i].up->data);
    if (!e || *e < 0 || *e >= c.experts() || !seen.insert(*e).second) {
      order.clear();
      break;
    }
    order.push_back({*e, i});
  }
  if (!order.empty()) {
    llvm::sort(order);
    std::vector<FfnMatch> sorted;
    for (auto &[e, i] : order)
      sorted.push_back(ffns[i]);
    ffns = std::move(sorted);
  }
  for (const FfnMatch &f : ffns)
    if (f.up->shape != ffns[0].up->shape ||
        f.down.shape != ffns[0].down.shape || f.gated() != ffns[0].gated() ||
        f.activation != ffns[0].activation ||
        f.up->source.transpose != ffns[0].up->source.transpose ||
        f.down.source.transpose != ffns[0].down.source.transpose) {
      c.g.error(*f.down.node) << "expert '" << f.down.source.initializers[0]
                              << "' differs from expert '"
                              << ffns[0].down.source.initializers[0]
                              << "' in shape, activation or layout";
      return failure();
    }
  return success();
}

/// The experts: projections downstream of the router are routed experts'
/// (one FFN per expert, or GShard/Tutel's single stacked [E, M, H]
/// weights), the rest shared experts' (DeepSeek's fused shared_experts:
/// exactly one FFN, with the routed experts' activation). Activations by
/// evaluation (probeActivation).
/// The initializer a constant-valued operand is computed from (first
/// found walking back through its producers), else empty.
std::string sourceInitializer(const OnnxGraph &g, const std::string &value) {
  std::vector<std::string> todo{value};
  for (size_t i = 0; i < todo.size() && i < 64; ++i) {
    if (g.isInitializer(todo[i]))
      return todo[i];
    if (const NodeProto *p = g.producer(todo[i]))
      todo.insert(todo.end(), p->input().begin(), p->input().end());
  }
  return "";
}

/// No routed product has a weight initializer as operand. When one reads a
/// weight computed from an initializer instead (DBRX's experts view and
/// chunk one fused w1 / v1 / w2 parameter for all experts), name it.
LogicalResult refuseNoExpertWeights(MoeCtx &c,
                                    const std::unordered_set<std::string> &routed) {
  for (const NodeProto *n : c.r.nodes) {
    if ((n->op_type() != "MatMul" && n->op_type() != "Gemm") ||
        n->input_size() < 2)
      continue;
    int k = routed.count(n->input(0)) ? 1 : 0;
    if (!routed.count(n->input(1 - k)) ||
        !isConstantValue(c.g, n->input(k)))
      continue;
    std::string init = sourceInitializer(c.g, n->input(k));
    if (init.empty())
      continue;
    c.g.error(*n) << "expert weight computed from initializer '" << init
                  << "' by " << c.g.nodeName(*c.g.producer(n->input(k)))
                  << " (one fused parameter sliced per expert, as DBRX's "
                     "w1 / v1 / w2); expert weights are imported as one "
                     "initializer per expert or one stacked [E, in, out] "
                     "initializer";
    return failure();
  }
  c.g.error(*c.sel) << "no expert weight projections downstream of the router";
  return failure();
}

LogicalResult groupExperts(MoeCtx &c) {
  const OnnxGraph &g = c.g;
  auto routed = c.rv.forwardCone({c.routerNode->output(0)});
  std::vector<WeightUse> routedProjs, sharedProjs;
  for (const NodeProto *n : c.r.nodes) {
    if (n == c.routerNode)
      continue;
    if (auto w = weightUse(g, *n))
      (routed.count(w->data) ? routedProjs : sharedProjs).push_back(*w);
  }
  if (routedProjs.empty())
    return refuseNoExpertWeights(c, routed);
  auto ffns = groupFfns(c.rv, routedProjs);
  if (failed(ffns))
    return failure();
  c.ffns = std::move(*ffns);
  for (FfnMatch &f : c.ffns)
    if (failed(probeActivation(c.t.eval, c.rv, f)))
      return failure();
  bool stacked3d = c.ffns.size() == 1 && c.ffns[0].down.shape.size() == 3;
  if (stacked3d) {
    const FfnMatch &f = c.ffns[0];
    for (const WeightUse *w : {f.up ? &*f.up : nullptr,
                               f.gate ? &*f.gate : nullptr, &f.down})
      if (w && w->shape[0] != c.experts()) {
        g.error(*w->node) << "stacked expert weight '"
                          << w->source.initializers[0] << "' has "
                          << w->shape[0] << " experts; the router has "
                          << c.experts();
        return failure();
      }
  } else if (failed(orderExperts(c))) {
    return failure();
  }
  // Each role's per-expert weights, when sliced from one parameter, must be
  // blocks a strided moe.source slice names (expertSlicesOk).
  auto role = [&](auto get) {
    std::vector<const WeightUse *> ws;
    for (const FfnMatch &f : c.ffns)
      if (const WeightUse *w = get(f))
        ws.push_back(w);
    if (expertSlicesOk(ws))
      return success();
    g.error(*ws.back()->node)
        << "expert weights sliced from '" << ws[0]->source.initializers[0]
        << "' are not equal row blocks at a constant stride in expert "
           "order; a stacked moe.source cannot name them";
    return failure();
  };
  auto opt = [](const std::optional<WeightUse> &w) {
    return w ? &*w : nullptr;
  };
  if (failed(role([&](const FfnMatch &f) { return opt(f.up); })) ||
      failed(role([&](const FfnMatch &f) { return opt(f.gate); })) ||
      failed(role([](const FfnMatch &f) { return &f.down; })))
    return failure();
  const FfnMatch &first = c.ffns[0];
  c.spec.activation = first.activation;
  c.spec.gated = first.gated();
  c.spec.hidden = first.hidden();
  int64_t m = c.router->shape[0];
  if (first.up->shape[first.up->shape.size() - 2] != m) {
    g.error(*first.up->node)
        << "expert input width " << first.up->shape[first.up->shape.size() - 2]
        << " differs from the router's " << m;
    return failure();
  }
  // Qwen2-MoE's shared_expert_gate: an M x 1 projection of the tokens
  // (its sigmoid scales the shared experts; claimRouting checks that).
  for (auto it = sharedProjs.begin(); it != sharedProjs.end(); ++it)
    if (it->shape.size() == 2 && it->shape[0] == m && it->shape[1] == 1) {
      c.sharedGate = *it;
      sharedProjs.erase(it);
      break;
    }
  if (sharedProjs.empty()) {
    if (c.sharedGate) {
      g.error(*c.sharedGate->node) << "an M x 1 projection '"
                                   << c.sharedGate->source.initializers[0]
                                   << "' but no shared experts for it to gate";
      return failure();
    }
    return success();
  }
  auto s = groupFfns(c.rv, sharedProjs);
  if (failed(s))
    return failure();
  c.shared = std::move(*s);
  for (FfnMatch &f : c.shared)
    if (failed(probeActivation(c.t.eval, c.rv, f)))
      return failure();
  if (c.shared.size() != 1) {
    g.error(*c.shared.back().down.node)
        << c.shared.size() << " separate shared-expert FFNs; only one "
        << "(DeepSeek's fused shared_experts) is supported";
    return failure();
  }
  if (c.shared[0].activation != c.spec.activation ||
      c.shared[0].gated() != c.spec.gated) {
    g.error(*c.shared[0].down.node)
        << "shared experts use a different activation or gating than the "
           "routed experts";
    return failure();
  }
  c.spec.sharedHidden = c.shared[0].hidden();
  c.spec.sharedGate = c.sharedGate.has_value();
  return success();
}

/// Capacity (GShard/Tutel, Switch): a constant compared with CumSum
/// positions counted over all tokens; 0-based `cumsum - 1 < C` and 1-based
/// `cumsum <= C` both give C slots. No comparison: dropless (Mixtral,
/// DeepSeek). f is chosen so that the verifier's ceil(f·k·B·N/E) gives C.
LogicalResult readCapacity(MoeCtx &c) {
  const OnnxGraph &g = c.g;
  std::optional<int64_t> capacity;
  for (const NodeProto *cs : c.rv.ofType("CumSum")) {
    // A per-sequence count ([B, N, E] along N, HF SwitchTransformers) is a
    // different limit than moe.gate's over all B·N tokens.
    auto rank = rankOf(g, cs->input(0));
    auto axis = evalInts(g, cs->input(1));
    if (rank && *rank != 2) {
      g.error(*cs) << "positions counted over a rank-" << *rank
                   << " tensor (per sequence?); only a capacity over all "
                      "tokens ([tokens, experts] along tokens) is supported";
      return failure();
    }
    if (rank && axis && axis->size() == 1 && (*axis)[0] != 0 &&
        (*axis)[0] != -2) {
      g.error(*cs) << "positions counted along the expert axis";
      return failure();
    }
    auto cone = c.rv.forwardCone({cs->output(0)});
    for (const NodeProto *n : c.r.nodes) {
      llvm::StringRef op = n->op_type();
      if (op != "Less" && op != "LessOrEqual" && op != "Greater" &&
          op != "GreaterOrEqual")
        continue;
      int posSide =
          cone.count(n->input(0)) ? 0 : cone.count(n->input(1)) ? 1 : -1;
      if (posSide < 0)
        continue;
      auto off = offsetFrom(c.rv, n->input(posSide), cs);
      if (!off)
        continue; // compares something computed from positions, not them
      auto bound = scalarConst(g, n->input(1 - posSide));
      if (!bound) {
        g.error(*n) << "capacity comparison of CumSum positions against a "
                       "non-constant";
        return failure();
      }
      // Kept iff pos < c (strict) or pos <= c, where pos = cumsum + off and
      // cumsum counts from 1.
      bool posLeft = posSide == 0;
      bool strict = posLeft ? (op == "Less" || op == "GreaterOrEqual")
                            : (op == "Greater" || op == "LessOrEqual");
      double limit = *bound - *off;
      int64_t cap = strict ? static_cast<int64_t>(std::ceil(limit)) - 1
                           : static_cast<int64_t>(std::floor(limit));
      if (cap < 1 || (capacity && *capacity != cap)) {
        g.error(*n) << "inconsistent expert capacity " << cap
                    << (capacity ? " (also " + std::to_string(*capacity) + ")"
                                 : std::string());
        return failure();
      }
      capacity = cap;
    }
  }
  if (!capacity) {
    c.spec.capacityFactor = std::nullopt;
    return success();
  }
  auto in = tokenShape(g, c.r.input);
  if (!in || in->size() != 3 || (*in)[0] <= 0 || (*in)[1] <= 0) {
    g.error(*c.sel) << "capacity " << *capacity
                    << " needs the static batch and sequence length of '"
                    << c.r.input << "' to give a capacity factor";
    return failure();
  }
  c.spec.capacityFactor = static_cast<double>(*capacity) * c.experts() /
                          (c.spec.topK * (*in)[0] * (*in)[1]);
  return success();
}

} // namespace

FailureOr<bool> matchTorchMoe(const OnnxGraph &g, const Region &r,
                              MatchTarget &t) {
  MoeCtx c(g, r, t);
  c.topks = c.rv.ofType("TopK");
  c.argmaxes = c.rv.ofType("ArgMax");
  if (c.topks.empty() && c.argmaxes.empty())
    return false;
  c.sel = !c.topks.empty() ? c.topks[0] : c.argmaxes[0];
  if (failed(rejectBiases(c.rv, "MoE")) || failed(findRouter(c)) ||
      failed(readTopK(c)) || failed(readNormalize(c)) ||
      failed(groupExperts(c)) || failed(readCapacity(c)))
    return failure();

  std::string prefix = blockPrefix(t.blockIndex);
  std::vector<ParamSpec> normParams;
  NormMatch nm;
  FailureOr<bool> norm =
      matchNorm(g, r.input, prefix + ".moe_norm", normParams, nm);
  if (failed(norm))
    return failure();
  c.spec.prenorm = *norm ? std::optional<NormKind>(nm.kind) : std::nullopt;
  if (*norm)
    c.spec.epsilon = nm.epsilon;
  RoutingParts parts{c.rv,     t.eval,   c.routerNode,
                     c.ffns,   c.shared, *norm ? &nm : nullptr,
                     c.spec.normalize, c.sharedGate ? &*c.sharedGate : nullptr};
  if (failed(claimRouting(parts, t.claims)))
    return failure();
  // The nodes that slice a weight out of a fused parameter (DBRX's w1 / v1
  // / w2 views and chunks) belong to the op that uses the weight.
  auto claimChains = [&](const std::vector<FfnMatch> &ffns, OpSite site) {
    for (const FfnMatch &f : ffns)
      for (const WeightUse *w :
           {f.up ? &*f.up : nullptr, f.gate ? &*f.gate : nullptr, &f.down})
        if (w)
          for (const NodeProto *n : w->chain)
            if (c.rv.contains(n))
              t.claims.add(n, site);
  };
  claimChains(c.ffns, OpSite::expert);
  claimChains(c.shared, OpSite::sharedExpert);
  t.params.insert(t.params.end(), normParams.begin(), normParams.end());
  t.params.push_back(
      {prefix + ".gate.weight", c.router->shape, c.router->source});
  addFfnParams(g, c.ffns, /*stacked=*/true, prefix + ".experts", t.params);
  if (!c.shared.empty())
    addFfnParams(g, c.shared, /*stacked=*/false, prefix + ".shared", t.params);
  if (c.sharedGate)
    t.params.push_back({prefix + ".shared.out_gate", c.sharedGate->shape,
                        c.sharedGate->source});
  t.block.moe = c.spec;
  return true;
}

} // namespace mlir::moe::frontend
