//===- MoeRouting.cpp - every node of a routed MoE sublayer, by what it holds -===//
//
// claimRouting types each value of a recognised MoE sublayer by what it
// holds (tokens, router logits, routing weights, their sum, routing
// indices/masks, expert hidden values, expert outputs, the shared experts'
// output) and claims each node for the `moe` op that computes it. The
// rules are per role (gate, token movement, masking, combine); a node that
// fits none computes something the `moe` ops would not, and is an error at
// it. The styles differ only in which of these nodes they use: Mixtral's
// expert loop (one_hot, NonZero, Gather, index_add_ as ScatterND), GShard's
// einsum dispatch/combine with 0/1 masks and accumulated combine weights,
// Switch's matmul dispatch and stacked outputs, DeepSeek's shared experts.
//
//===----------------------------------------------------------------------===//
#include "TorchMatch.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

#include <unordered_map>
#include <unordered_set>

namespace mlir::moe::frontend::torchpat {

using onnx::NodeProto;

namespace {

/// What a value of the MoE sublayer holds.
enum class Kind {
  tokens,   // the (normed) tokens, moved towards the experts
  logits,   // router logits
  probs,    // router scores and the kept routing weights
  sum,      // the sum of kept weights (the renormaliser)
  indices,  // selections, masks, positions: anything computed from them
  expertIn, // inside an expert FFN
  outputs,  // expert outputs, weighted, moved back, accumulated
  shared,   // the shared experts' output
  sharedGateLogit, // x · w_g of Qwen2-MoE's shared-expert gate
  sharedGateScale, // its sigmoid
};

const char *kindName(Kind k) {
  switch (k) {
  case Kind::tokens:
    return "token";
  case Kind::logits:
    return "router-logit";
  case Kind::probs:
    return "routing-weight";
  case Kind::sum:
    return "routing-weight sum";
  case Kind::indices:
    return "routing-index/mask";
  case Kind::expertIn:
    return "expert-hidden";
  case Kind::outputs:
    return "expert-output";
  case Kind::shared:
    return "shared-expert-output";
  case Kind::sharedGateLogit:
    return "shared-expert-gate logit";
  case Kind::sharedGateScale:
    return "shared-expert-gate scale";
  }
  return "?";
}

/// Ops that move values without computing new ones.
bool isMovement(const NodeProto &n) {
  static const llvm::StringSet<> ops = {
      "Reshape", "Transpose", "Squeeze",  "Unsqueeze",      "Flatten",
      "Identity", "Slice",    "Split",    "Concat",         "Expand",
      "Tile",    "Gather",    "GatherND", "GatherElements", "Dropout"};
  return ops.contains(n.op_type()) || isNoOpCast(n);
}

/// A node's computed operands (input index, kind); constants are left out.
struct Operands {
  std::vector<std::pair<int, Kind>> in;
  bool all(Kind k) const {
    return llvm::all_of(in, [&](auto &x) { return x.second == k; });
  }
  bool has(Kind k) const {
    return llvm::any_of(in, [&](auto &x) { return x.second == k; });
  }
  /// The kinds other than `k`, when there is exactly one such operand.
  std::optional<Kind> onlyOther(Kind k) const {
    std::optional<Kind> r;
    int count = 0;
    for (auto &x : in)
      if (x.second != k) {
        r = x.second;
        ++count;
      }
    return count == 1 ? r : std::nullopt;
  }
};

/// What a node yields and the op it belongs to.
struct Typed {
  Kind kind;
  OpSite site;
};

class RoutingTyper {
public:
  RoutingTyper(const RoutingParts &p, Claims &claims)
      : p(p), rv(p.rv), g(p.rv.graph()), claims(claims) {}

  LogicalResult run();

private:
  const RoutingParts &p;
  const RegionView &rv;
  const OnnxGraph &g;
  Claims &claims;
  std::unordered_map<std::string, Kind> kind;
  std::unordered_set<const NodeProto *> done;
  bool weighted = false, sharedAdded = false, sharedGated = false;

  void claimKnownParts();
  void claimFfn(const FfnMatch &f, OpSite site, Kind out);
  FailureOr<Operands> operands(const NodeProto &n) const;
  bool zeroConstants(const NodeProto &n) const;
  std::optional<Typed> typeShapeReader(const NodeProto &n) const;
  std::optional<Typed> typeMovement(const NodeProto &n,
                                    const Operands &o) const;
  std::optional<Typed> typeGate(const NodeProto &n, const Operands &o) const;
  std::optional<Typed> typeMasking(const NodeProto &n,
                                   const Operands &o) const;
  std::optional<Typed> typeCombine(const NodeProto &n, const Operands &o);
  std::optional<Typed> typeSharedGate(const NodeProto &n, const Operands &o);
  LogicalResult checkResult() const;
};

/// The pieces already recognised: the norm, the FFNs (projections and what
/// lies between them), the router projection.
void RoutingTyper::claimKnownParts() {
  kind[p.norm ? p.norm->output : rv.region().input] = Kind::tokens;
  if (p.norm) {
    claims.add(p.norm->nodes, OpSite::ffnNorm);
    done.insert(p.norm->nodes.begin(), p.norm->nodes.end());
  }
  for (const FfnMatch &f : p.experts)
    claimFfn(f, OpSite::expert, Kind::outputs);
  for (const FfnMatch &f : p.shared)
    claimFfn(f, OpSite::sharedExpert, Kind::shared);
  for (const NodeProto *n : projectionNodes(rv, *weightUse(g, *p.router))) {
    claims.add(n, OpSite::gate);
    done.insert(n);
  }
  kind[p.router->output(0)] = Kind::logits;
  sharedAdded = p.shared.empty();
  if (p.sharedGate) {
    for (const NodeProto *n : projectionNodes(rv, *p.sharedGate)) {
      claims.add(n, OpSite::sharedGate);
      done.insert(n);
    }
    kind[p.sharedGate->node->output(0)] = Kind::sharedGateLogit;
  }
}

/// Qwen2-MoE: shared = sigmoid(x · w_g) * shared, once, before the add.
std::optional<Typed> RoutingTyper::typeSharedGate(const NodeProto &n,
                                                  const Operands &o) {
  llvm::StringRef op = n.op_type();
  if (op == "Sigmoid" && o.all(Kind::sharedGateLogit))
    return Typed{Kind::sharedGateScale, OpSite::sharedGate};
  if (op == "Mul" && o.in.size() == 2 && o.has(Kind::sharedGateScale) &&
      o.has(Kind::shared) && !sharedGated) {
    sharedGated = true;
    return Typed{Kind::shared, OpSite::sharedGate};
  }
  return std::nullopt;
}

void RoutingTyper::claimFfn(const FfnMatch &f, OpSite site, Kind out) {
  std::vector<const NodeProto *> ns = ffnInner(rv, f);
  for (const WeightUse *w :
       {f.up ? &*f.up : nullptr, f.gate ? &*f.gate : nullptr, &f.down})
    if (w)
      for (const NodeProto *n : projectionNodes(rv, *w))
        ns.push_back(n);
  for (const NodeProto *n : ns) {
    claims.add(n, site);
    done.insert(n);
    for (const std::string &o : n->output())
      kind[o] = Kind::expertIn;
  }
  kind[f.down.node->output(0)] = out;
}

FailureOr<Operands> RoutingTyper::operands(const NodeProto &n) const {
  Operands o;
  for (int i = 0; i < n.input_size(); ++i) {
    if (n.input(i).empty() || p.eval.known(n.input(i)))
      continue;
    auto it = kind.find(n.input(i));
    if (it == kind.end()) {
      g.error(n) << "in the MoE sublayer, input '" << n.input(i)
                 << "' is computed outside the recognised routing";
      return failure();
    }
    o.in.push_back({i, it->second});
  }
  return o;
}

/// Constant operands that are all zero (accumulators) change nothing.
bool RoutingTyper::zeroConstants(const NodeProto &n) const {
  for (const std::string &i : n.input())
    if (!i.empty() && p.eval.known(i))
      if (llvm::any_of(p.eval.value(i)->data, [](double x) { return x != 0; }))
        return false;
  return true;
}

/// Shape / Size read only the (dynamic) shape; ConstantOfShape of zeros is
/// the accumulator expert outputs are added into (Mixtral's zeros_like).
std::optional<Typed> RoutingTyper::typeShapeReader(const NodeProto &n) const {
  llvm::StringRef op = n.op_type();
  if (op == "Shape" || op == "Size")
    return Typed{Kind::indices, OpSite::dispatch};
  if (op != "ConstantOfShape")
    return std::nullopt;
  StaticTensor one{{1}, {1.0}, false};
  auto v = evalNode(n, {&one}, g.opset());
  bool zeros = v[0] && llvm::all_of(v[0]->data, [](double x) { return x == 0; });
  return zeros ? Typed{Kind::outputs, OpSite::combine}
               : Typed{Kind::indices, OpSite::dispatch};
}

/// Moving, gathering by routing indices, stacking: the data operand's kind.
std::optional<Typed> RoutingTyper::typeMovement(const NodeProto &n,
                                                const Operands &o) const {
  if (!isMovement(n) || o.in.empty() || o.in[0].first != 0)
    return std::nullopt;
  Kind k = o.in[0].second;
  for (auto &x : llvm::drop_begin(o.in))
    if (x.second != Kind::indices &&
        !(n.op_type() == "Concat" && x.second == k))
      return std::nullopt;
  if (k == Kind::expertIn || k == Kind::shared || k == Kind::sum)
    return std::nullopt;
  OpSite site = k == Kind::tokens || k == Kind::indices ? OpSite::dispatch
                : k == Kind::logits                     ? OpSite::gate
                                                        : OpSite::combine;
  return Typed{k, site};
}

/// The router's scores, the selection by value (ArgMax, Switch's
/// ReduceMax), the renormalisation (ReduceSum, Div). TopK is typed in run
/// (two outputs).
std::optional<Typed> RoutingTyper::typeGate(const NodeProto &n,
                                            const Operands &o) const {
  llvm::StringRef op = n.op_type();
  bool scores = o.all(Kind::probs) || o.all(Kind::logits);
  if ((op == "Softmax" || op == "Sigmoid") && o.all(Kind::logits))
    return Typed{Kind::probs, OpSite::gate};
  if (op == "ArgMax" && scores)
    return Typed{Kind::indices, OpSite::gate};
  if (op == "ReduceMax" && o.all(Kind::probs))
    return Typed{Kind::probs, OpSite::gate};
  // The L1 norm of positive weights is their sum (readNormalize).
  if ((op == "ReduceSum" || op == "ReduceL1") && o.all(Kind::probs) &&
      p.normalize)
    return Typed{Kind::sum, OpSite::gate};
  if (op == "Div" && o.in.size() == 2 && o.in[0].first == 0 &&
      o.in[0].second == Kind::probs && o.in[1].second == Kind::sum)
    return Typed{Kind::probs, OpSite::gate};
  return std::nullopt;
}

/// Selection plumbing (anything computed from indices only), masking by a
/// 0/1 routing mask, comparisons (capacity; GShard's dispatch = combine >
/// 0), and dispatch as a product with a mask.
std::optional<Typed> RoutingTyper::typeMasking(const NodeProto &n,
                                               const Operands &o) const {
  llvm::StringRef op = n.op_type();
  if (o.all(Kind::indices))
    return Typed{Kind::indices, OpSite::dispatch};
  if ((op == "Mul" || op == "Where") && o.has(Kind::indices))
    if (std::optional<Kind> k = o.onlyOther(Kind::indices))
      if (*k == Kind::tokens || *k == Kind::probs || *k == Kind::outputs)
        return Typed{*k, *k == Kind::tokens ? OpSite::dispatch
                                            : OpSite::combine};
  bool compare = op == "Less" || op == "LessOrEqual" || op == "Greater" ||
                 op == "GreaterOrEqual" || op == "Equal";
  if (compare && o.all(Kind::probs))
    return Typed{Kind::indices, OpSite::dispatch};
  if ((op == "Einsum" || op == "MatMul") && o.in.size() == 2 &&
      o.has(Kind::indices) && o.has(Kind::tokens))
    return Typed{Kind::tokens, OpSite::dispatch};
  return std::nullopt;
}

/// Expert outputs scaled by routing weights, scattered back to token order
/// (index_add_), accumulated; the shared experts added once.
std::optional<Typed> RoutingTyper::typeCombine(const NodeProto &n,
                                               const Operands &o) {
  llvm::StringRef op = n.op_type();
  if ((op == "Einsum" || op == "MatMul" || op == "Mul") && o.in.size() == 2 &&
      o.has(Kind::probs) && o.has(Kind::outputs)) {
    weighted = true;
    return Typed{Kind::outputs, OpSite::combine};
  }
  std::string reduction = attrString(n, "reduction", "none");
  if ((op == "ScatterND" || op == "ScatterElements") &&
      (reduction == "none" || reduction == "add") &&
      llvm::all_of(o.in, [](auto &x) {
        return x.second == Kind::outputs || x.second == Kind::indices;
      }))
    return Typed{Kind::outputs, OpSite::combine};
  if ((op == "Add" || op == "Sum") &&
      (o.all(Kind::outputs) || o.all(Kind::probs)) && zeroConstants(n))
    return Typed{o.in[0].second, OpSite::combine};
  if (op == "Add" && o.in.size() == 2 && o.has(Kind::outputs) &&
      o.has(Kind::shared) && !sharedAdded) {
    sharedAdded = true;
    return Typed{Kind::outputs, OpSite::sharedAdd};
  }
  return std::nullopt;
}

/// The weights must scale the expert outputs, the result must be the
/// combined output, and the experts must read dispatched tokens.
LogicalResult RoutingTyper::checkResult() const {
  if (!weighted) {
    g.error(*p.router) << "the routing weights never scale the expert "
                          "outputs; moe.combine weights each expert's output "
                          "by its gate value";
    return failure();
  }
  auto it = kind.find(rv.region().output);
  if (it == kind.end() || it->second != Kind::outputs) {
    const NodeProto *at = g.producer(rv.region().output);
    g.error(at ? *at : *p.router)
        << "the MoE sublayer's result is not the combined expert output"
        << (sharedAdded ? "" : " (the shared experts are never added)");
    return failure();
  }
  if (p.sharedGate && (!sharedGated || !kind.count(p.sharedGate->data) ||
                       kind.at(p.sharedGate->data) != Kind::tokens)) {
    g.error(*p.sharedGate->node)
        << "the shared-expert gate projection '"
        << p.sharedGate->source.initializers[0]
        << "' does not scale the shared experts' output by the sigmoid of "
           "the tokens' projection (moe.sigmoid_gate)";
    return failure();
  }
  for (const FfnMatch &f : p.experts)
    for (const WeightUse *w :
         {f.up ? &*f.up : nullptr, f.gate ? &*f.gate : nullptr}) {
      auto k = w ? kind.find(w->data) : kind.end();
      if (w && (k == kind.end() || k->second != Kind::tokens)) {
        g.error(*w->node) << "the expert projection reads something other "
                             "than dispatched tokens";
        return failure();
      }
    }
  return success();
}

LogicalResult RoutingTyper::run() {
  claimKnownParts();
  for (const NodeProto *n : rv.region().nodes) {
    if (done.count(n) || p.eval.knownNode(*n))
      continue;
    FailureOr<Operands> o = operands(*n);
    if (failed(o))
      return failure();
    if (o->in.empty())
      continue; // a node without computed operands is statically known
    if (n->op_type() == "TopK" &&
        (o->all(Kind::probs) || o->all(Kind::logits))) {
      kind[n->output(0)] = o->in[0].second;
      if (n->output_size() > 1)
        kind[n->output(1)] = Kind::indices;
      claims.add(n, OpSite::gate);
      continue;
    }
    std::optional<Typed> t = typeShapeReader(*n);
    if (!t)
      t = typeMovement(*n, *o);
    if (!t)
      t = typeGate(*n, *o);
    if (!t)
      t = typeMasking(*n, *o);
    if (!t)
      t = typeCombine(*n, *o);
    if (!t)
      t = typeSharedGate(*n, *o);
    if (!t) {
      InFlightDiagnostic d = g.error(*n);
      d << n->op_type() << " of ";
      for (auto [k, x] : llvm::enumerate(o->in))
        d << (k ? ", " : "") << kindName(x.second);
      d << " values is not part of routed MoE as the moe ops compute it "
           "(router, softmax/sigmoid, top-k, renormalisation, token dispatch, "
           "expert FFNs, weighted combine, shared experts)";
      return failure();
    }
    for (const std::string &out : n->output())
      if (!out.empty())
        kind[out] = t->kind;
    claims.add(n, t->site);
  }
  return checkResult();
}

} // namespace

LogicalResult claimRouting(const RoutingParts &p, Claims &claims) {
  return RoutingTyper(p, claims).run();
}

} // namespace mlir::moe::frontend::torchpat
