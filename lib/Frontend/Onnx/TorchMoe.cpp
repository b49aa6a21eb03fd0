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

const llvm::StringSet<> &moeOps() {
  static const llvm::StringSet<> ops = {
      "MatMul", "Gemm", "Einsum", "Transpose", "Reshape", "Flatten", "Squeeze",
      "Unsqueeze", "Concat", "Split", "Slice", "Gather", "GatherElements",
      "GatherND", "ScatterND", "ScatterElements", "NonZero", "OneHot",
      "CumSum", "TopK", "ArgMax", "ReduceMax", "ReduceSum", "ReduceMean",
      "Softmax", "Sigmoid", "Relu", "Erf", "Tanh", "Gelu", "Div", "Mul", "Add",
      "Sub", "Neg", "Pow", "Sqrt", "Reciprocal", "Cast", "Shape", "Constant",
      "ConstantOfShape", "Identity", "Expand", "Tile", "Range", "Where",
      "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not",
      "And", "Or", "Clip", "Max", "Min", "Abs", "Floor", "Ceil",
      "LayerNormalization", "Dropout", "Size"};
  return ops;
}

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

FailureOr<bool> matchTorchMoe(const OnnxGraph &g, const Region &r,
                              MatchTarget &t) {
  RegionView rv(g, r);
  auto topks = rv.ofType("TopK"), argmaxes = rv.ofType("ArgMax");
  if (topks.empty() && argmaxes.empty())
    return false;
  const NodeProto *sel = !topks.empty() ? topks[0] : argmaxes[0];

  for (const NodeProto *n : r.nodes)
    if (!moeOps().contains(n->op_type())) {
      g.error(*n) << "node of type " << n->op_type()
                  << " in the MoE sublayer is not understood";
      return failure();
    }
  if (failed(rejectBiases(rv, "MoE")))
    return failure();

  // Router: the Softmax / Sigmoid scores behind the selection and the
  // weight MatMul behind them. TopK over raw logits followed by a Softmax of
  // the kept values is the same gate as softmax -> top-k -> renormalise.
  const NodeProto *scoresNode = nullptr, *routerNode = nullptr;
  for (const NodeProto *n : rv.backwardNodes(sel->input(0))) {
    if (!scoresNode &&
        (n->op_type() == "Softmax" || n->op_type() == "Sigmoid"))
      scoresNode = n;
    if (auto w = weightUse(g, *n); w && w->shape.size() == 2) {
      routerNode = n;
      break;
    }
  }
  if (!routerNode) {
    g.error(*sel) << "expert selection is not computed from a router "
                     "projection (a MatMul with an M x E weight)";
    return failure();
  }
  WeightUse router = *weightUse(g, *routerNode);
  int64_t experts = router.shape[1], m = router.shape[0];
  bool logitsTopK = false;
  if (!scoresNode && !topks.empty())
    for (const NodeProto *u : rv.users(sel->output(0)))
      if (u->op_type() == "Softmax") {
        scoresNode = u;
        logitsTopK = true;
      }
  if (!scoresNode) {
    g.error(*sel) << "router scores are neither a Softmax nor a Sigmoid of "
                     "the router logits";
    return failure();
  }
  MoeLayerSpec spec(g.loc(*sel));
  spec.experts = experts;
  spec.gate = scoresNode->op_type() == "Sigmoid" ? GateKind::sigmoid
                                                 : GateKind::softmax_topk;
  if (scoresNode->op_type() == "Softmax") {
    int64_t axis = attrInt(*scoresNode, "axis", g.opset() >= 13 ? -1 : 1);
    auto s = g.shape(scoresNode->input(0));
    if (!s)
      s = g.shape(router.data); // MatMul keeps its input's rank
    if (axis != -1 && s && axis != static_cast<int64_t>(s->size()) - 1) {
      g.error(*scoresNode) << "router softmax is over axis " << axis
                           << ", not over the experts";
      return failure();
    }
  }

  // k: TopK's constant K, or one per ArgMax over the scores.
  if (!topks.empty()) {
    if (topks.size() > 1 || !argmaxes.empty()) {
      g.error(*topks.back()) << "several expert selections (TopK / ArgMax) in "
                                "one MoE sublayer";
      return failure();
    }
    auto kv = evalInts(g, sel->input(1));
    if (!kv || kv->size() != 1 || (*kv)[0] < 1 || (*kv)[0] > experts) {
      g.error(*sel) << "TopK's K is not a constant in [1, " << experts << "]";
      return failure();
    }
    spec.topK = (*kv)[0];
    if (!attrInt(*sel, "largest", 1)) {
      g.error(*sel) << "TopK selects the smallest scores";
      return failure();
    }
  } else if (argmaxes.size() > 1) {
    // GShard's original top-2 (argmax, mask, argmax again) renormalises the
    // two gates by their sum in ways this matcher does not trace yet;
    // importing it as un-normalised top-2 would be silently wrong.
    g.error(*argmaxes[1]) << "top-" << argmaxes.size()
                          << " by repeated ArgMax is not supported; export "
                             "the selection with torch.topk";
    return failure();
  } else {
    spec.topK = 1;
  }

  // Renormalisation: kept weights divided by their sum.
  const NodeProto *normDiv = nullptr;
  if (logitsTopK) {
    spec.normalize = true;
  } else if (!topks.empty()) {
    auto kept = rv.forwardCone({sel->output(0)});
    for (const NodeProto *d : rv.ofType("Div")) {
      if (!kept.count(d->input(0)))
        continue;
      for (const NodeProto *n : rv.backwardNodes(d->input(1)))
        if (n->op_type() == "ReduceSum" && kept.count(n->input(0))) {
          spec.normalize = true;
          normDiv = d;
        }
    }
  }
  if (spec.normalize && spec.gate == GateKind::sigmoid) {
    g.error(normDiv ? *normDiv : *sel)
        << "sigmoid router scores renormalised over the top-" << spec.topK
        << " (DeepSeek-V3 style) are not supported: moe.gate's sigmoid kind "
           "scales by the raw sigmoid, and normalize applies to softmax gates "
           "only";
    return failure();
  }

  // Projections downstream of the router are the routed experts', the rest
  // (reading the tokens directly) are shared experts'.
  auto routed = rv.forwardCone({routerNode->output(0)});
  std::vector<WeightUse> routedProjs, sharedProjs;
  for (const NodeProto *n : r.nodes) {
    if (n == routerNode)
      continue;
    if (auto w = weightUse(g, *n))
      (routed.count(w->data) ? routedProjs : sharedProjs).push_back(*w);
  }
  if (routedProjs.empty()) {
    g.error(*sel) << "no expert weight projections downstream of the router";
    return failure();
  }
  auto experts_ = groupFfns(rv, routedProjs);
  if (failed(experts_))
    return failure();
  std::vector<FfnMatch> &ffns = *experts_;
  bool stacked3d = ffns.size() == 1 && ffns[0].down.shape.size() == 3;
  if (stacked3d) {
    for (const WeightUse *w : {ffns[0].up ? &*ffns[0].up : nullptr,
                               ffns[0].gate ? &*ffns[0].gate : nullptr,
                               &ffns[0].down})
      if (w && w->shape[0] != experts) {
        g.error(*w->node) << "stacked expert weight '"
                          << w->source.initializers[0] << "' has "
                          << w->shape[0] << " experts; the router has "
                          << experts;
        return failure();
      }
  } else {
    if (static_cast<int64_t>(ffns.size()) != experts) {
      g.error(*sel) << "the router chooses among " << experts
                    << " experts but " << ffns.size()
                    << " expert FFNs were found";
      return failure();
    }
    // Expert order: by the constant index selecting each expert's tokens
    // when every expert has a distinct one, else graph order (the order of
    // torch's Python loop over experts).
    std::vector<std::pair<int64_t, size_t>> order;
    std::set<int64_t> seen;
    for (size_t i = 0; i < ffns.size(); ++i) {
      auto e = expertIndex(rv, ffns[i].up->data);
      if (!e || *e < 0 || *e >= experts || !seen.insert(*e).second) {
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
        g.error(*f.down.node) << "expert '" << f.down.source.initializers[0]
                              << "' differs from expert '"
                              << ffns[0].down.source.initializers[0]
                              << "' in shape, activation or layout";
        return failure();
      }
  }
  spec.activation = ffns[0].activation;
  spec.gated = ffns[0].gated();
  spec.hidden = ffns[0].hidden();
  if (ffns[0].up->shape[ffns[0].up->shape.size() - 2] != m) {
    g.error(*ffns[0].up->node) << "expert input width "
                               << ffns[0].up->shape[ffns[0].up->shape.size() - 2]
                               << " differs from the router's " << m;
    return failure();
  }

  std::vector<FfnMatch> shared;
  if (!sharedProjs.empty()) {
    auto s = groupFfns(rv, sharedProjs);
    if (failed(s))
      return failure();
    shared = std::move(*s);
    if (shared.size() != 1) {
      g.error(*shared.back().down.node)
          << shared.size() << " separate shared-expert FFNs; only one "
          << "(DeepSeek's fused shared_experts) is supported";
      return failure();
    }
    if (shared[0].activation != spec.activation ||
        shared[0].gated() != spec.gated) {
      g.error(*shared[0].down.node)
          << "shared experts use a different activation or gating than the "
             "routed experts";
      return failure();
    }
    spec.sharedHidden = shared[0].hidden();
  }

  // Capacity: a constant compared with CumSum positions.
  std::optional<int64_t> capacity;
  for (const NodeProto *cs : rv.ofType("CumSum")) {
    // Positions must count over all B·N tokens ([T, E] along T), as
    // moe.gate's capacity does; a per-sequence count ([B, N, E] along N,
    // HF SwitchTransformers) is a different limit.
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
    auto cone = rv.forwardCone({cs->output(0)});
    for (const NodeProto *n : r.nodes) {
      llvm::StringRef op = n->op_type();
      if (op != "Less" && op != "LessOrEqual" && op != "Greater" &&
          op != "GreaterOrEqual")
        continue;
      int posSide = cone.count(n->input(0)) ? 0 : cone.count(n->input(1)) ? 1 : -1;
      if (posSide < 0)
        continue;
      auto off = offsetFrom(rv, n->input(posSide), cs);
      if (!off)
        continue; // compares something computed from positions, not them
      auto c = scalarConst(g, n->input(1 - posSide));
      if (!c) {
        g.error(*n) << "capacity comparison of CumSum positions against a "
                       "non-constant";
        return failure();
      }
      // Kept iff pos < c (strict) or pos <= c, where pos = cumsum + off and
      // cumsum counts from 1.
      bool posLeft = posSide == 0;
      bool strict = posLeft ? (op == "Less" || op == "GreaterOrEqual")
                            : (op == "Greater" || op == "LessOrEqual");
      double bound = *c - *off;
      int64_t cap = strict ? static_cast<int64_t>(std::ceil(bound)) - 1
                           : static_cast<int64_t>(std::floor(bound));
      if (cap < 1 || (capacity && *capacity != cap)) {
        g.error(*n) << "inconsistent expert capacity " << cap
                    << (capacity ? " (also " + std::to_string(*capacity) + ")"
                                 : std::string());
        return failure();
      }
      capacity = cap;
    }
  }
  if (capacity) {
    auto in = tokenShape(g, r.input);
    if (!in || in->size() != 3 || (*in)[0] <= 0 || (*in)[1] <= 0) {
      g.error(*sel) << "capacity " << *capacity
                    << " needs the static batch and sequence length of '"
                    << r.input << "' to give a capacity factor";
      return failure();
    }
    // f such that the verifier's C = ceil(f·k·B·N/E) gives back C.
    spec.capacityFactor = static_cast<double>(*capacity) * experts /
                          (spec.topK * (*in)[0] * (*in)[1]);
  } else {
    spec.capacityFactor = std::nullopt;
  }

  std::string prefix = blockPrefix(t.blockIndex);
  std::vector<ParamSpec> normParams;
  NormMatch nm;
  FailureOr<bool> norm =
      matchNorm(g, r.input, prefix + ".moe_norm", normParams, nm);
  if (failed(norm))
    return failure();
  if (*norm) {
    spec.prenorm = nm.kind;
    spec.epsilon = nm.epsilon;
  } else {
    spec.prenorm = std::nullopt;
  }
  t.params.insert(t.params.end(), normParams.begin(), normParams.end());
  t.params.push_back({prefix + ".gate.weight", router.shape, router.source});
  addFfnParams(g, ffns, /*stacked=*/true, prefix + ".experts", t.params);
  if (!shared.empty())
    addFfnParams(g, shared, /*stacked=*/false, prefix + ".shared", t.params);
  t.block.moe = spec;
  return true;
}

} // namespace mlir::moe::frontend
