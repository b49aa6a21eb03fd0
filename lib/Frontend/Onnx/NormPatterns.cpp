//===- NormPatterns.cpp - LayerNorm / RMSNorm in their ONNX spellings -----===//
//
// matchNorm recognises a norm that reads `input`:
//   - LayerNormalization (ai.onnx, opset 17): scale / bias inputs, epsilon;
//   - the decomposition torch writes below opset 17:
//       m = ReduceMean(x); d = Sub(x, m); v = ReduceMean(Pow(d, 2));
//       y = Div(d, Sqrt(Add(v, eps))) [* scale] [+ bias]
//   - RMSNorm as HF / hand-written code exports it:
//       s = ReduceMean(Pow(x, 2) | Mul(x, x)); r = Add(s, eps);
//       y = Div(x, Sqrt(r)) | Mul(x, Reciprocal(Sqrt(r)))
//           | Mul(x, Div(1, Sqrt(r)));   y * weight
//   - RMSNormalization (ai.onnx, opset 23) and com.microsoft
//     SimplifiedLayerNormalization.
// The reduction must be over the last axis (keepdims), which is what the
// `moe.norm` op computes; anything else is "not a norm" (false), so the
// caller reports the node. Scale and bias must be initializers: they become
// `<prefix>.scale` / `<prefix>.bias` with the initializer as WeightSource.
//
//===----------------------------------------------------------------------===//

#include "Patterns.h"

#include <cmath>

using namespace mlir;
using namespace mlir::moe::frontend;
using mlir::moe::NormKind;

namespace {

bool isOp(const onnx::NodeProto &n, llvm::StringRef op,
          llvm::StringRef domain = "") {
  llvm::StringRef d = n.domain();
  if (d == "ai.onnx")
    d = "";
  return n.op_type() == op && d == domain;
}

/// The first consumer of `v` that is an `op` node reading `v` as an input.
const onnx::NodeProto *consumer(const OnnxGraph &g, llvm::StringRef v,
                                llvm::StringRef op,
                                llvm::StringRef domain = "") {
  for (const onnx::NodeProto *c : g.consumers(v))
    if (isOp(*c, op, domain))
      return c;
  return nullptr;
}

/// For a binary node reading `v`, the other operand ("" when both are v).
std::string other(const onnx::NodeProto &n, llvm::StringRef v) {
  if (n.input_size() != 2)
    return "";
  if (n.input(0) == v)
    return n.input(1) == v ? std::string() : n.input(1);
  if (n.input(1) == v)
    return n.input(0);
  return "";
}

/// A scalar constant (any rank, one element).
std::optional<double> scalar(const OnnxGraph &g, llvm::StringRef v) {
  auto vals = g.floatValues(v);
  if (!vals || vals->size() != 1)
    return std::nullopt;
  return vals->front();
}

/// True when a ReduceMean reduces only the last axis and keeps it.
bool reducesLastAxis(const OnnxGraph &g, const onnx::NodeProto &n) {
  if (attrInt(n, "keepdims", 1) != 1)
    return false;
  std::vector<int64_t> axes = attrInts(n, "axes");
  if (axes.empty() && n.input_size() > 1 && !n.input(1).empty()) {
    auto a = g.intValues(n.input(1)); // opset 18: axes is an input
    if (!a)
      return false;
    axes = *a;
  }
  if (axes.size() != 1)
    return false;
  if (axes[0] == -1)
    return true;
  auto s = g.shape(n.input(0));
  return s && !s->empty() && axes[0] == int64_t(s->size()) - 1;
}

struct Matcher {
  const OnnxGraph &g;
  llvm::StringRef prefix;
  std::vector<ParamSpec> &params;
  NormMatch &out;
  const onnx::NodeProto *anchor = nullptr;

  /// Records the node (and a Constant node feeding it) as part of the norm.
  void take(const onnx::NodeProto *n) {
    out.nodes.push_back(n);
    for (const std::string &in : n->input())
      if (const onnx::NodeProto *p = in.empty() ? nullptr : g.producer(in))
        if (isOp(*p, "Constant"))
          out.nodes.push_back(p);
  }

  /// Adds `<prefix>.<what>` from initializer `v`; failure if `v` is not one.
  LogicalResult addParam(llvm::StringRef what, llvm::StringRef v,
                         const onnx::NodeProto &at) {
    if (!g.isInitializer(v)) {
      g.error(at) << "the norm's " << what << " '" << v
                  << "' is computed, not an initializer; only learned "
                     "(initializer) norm weights are supported";
      return failure();
    }
    ParamSpec p;
    p.name = (prefix + "." + what).str();
    p.shape = g.shape(v).value_or(std::vector<int64_t>{});
    if (p.shape.size() != 1) {
      g.error(at) << "the norm's " << what << " '" << v << "' has rank "
                  << p.shape.size() << "; expected a vector of size M";
      return failure();
    }
    p.source.initializers = {v.str()};
    p.source.file = g.path().str();
    params.push_back(std::move(p));
    return success();
  }

  /// Optional `y * scale` then `+ bias` after the normalised value `y`.
  /// Returns the final value; scale is required (the moe.norm op has one).
  FailureOr<std::string> affine(const std::string &y, bool allowBias) {
    const onnx::NodeProto *mul = consumer(g, y, "Mul");
    std::string w = mul ? other(*mul, y) : "";
    if (!mul || w.empty()) {
      g.error(*anchor) << "norm without a learned scale (no Mul by an "
                          "initializer after it) is not supported";
      return failure();
    }
    if (failed(addParam("scale", w, *mul)))
      return failure();
    take(mul);
    std::string v = mul->output(0);
    if (!allowBias)
      return v;
    if (const onnx::NodeProto *add = consumer(g, v, "Add")) {
      std::string b = other(*add, v);
      if (!b.empty() && g.isInitializer(b)) {
        if (failed(addParam("bias", b, *add)))
          return failure();
        take(add);
        return std::string(add->output(0));
      }
    }
    return v;
  }

  /// LayerNormalization / RMSNormalization / SimplifiedLayerNormalization.
  FailureOr<bool> fused() {
    for (const onnx::NodeProto *n : g.consumers(out.output)) {
      bool layer = isOp(*n, "LayerNormalization");
      bool rms = isOp(*n, "RMSNormalization") ||
                 isOp(*n, "SimplifiedLayerNormalization", "com.microsoft") ||
                 isOp(*n, "SimplifiedLayerNormalization");
      if ((!layer && !rms) || n->input_size() < 2 || n->input(0) != out.output)
        continue;
      int64_t axis = attrInt(*n, "axis", -1);
      auto s = g.shape(n->input(0));
      if (axis != -1 && !(s && axis == int64_t(s->size()) - 1)) {
        g.error(*n) << "normalises over axis " << axis
                    << "; only the last (embedding) axis is supported";
        return failure();
      }
      out.kind = layer ? NormKind::layer : NormKind::rms;
      out.epsilon = attrFloat(*n, "epsilon", 1e-5);
      if (failed(addParam("scale", n->input(1), *n)))
        return failure();
      if (layer && n->input_size() > 2 && !n->input(2).empty()) {
        if (failed(addParam("bias", n->input(2), *n)))
          return failure();
      }
      take(n);
      out.output = n->output(0);
      return true;
    }
    return false;
  }

  /// The tail shared by both decompositions: from the mean of squares
  /// `ms`, Add eps then 1/sqrt applied to `x`. Returns the normalised value.
  std::optional<std::string> rsqrtApply(const std::string &ms,
                                        const std::string &x) {
    const onnx::NodeProto *add = consumer(g, ms, "Add");
    if (!add)
      return std::nullopt;
    auto eps = scalar(g, other(*add, ms));
    if (!eps)
      return std::nullopt;
    const onnx::NodeProto *sq = consumer(g, add->output(0), "Sqrt");
    if (!sq)
      return std::nullopt;
    const std::string &s = sq->output(0);
    std::vector<const onnx::NodeProto *> nodes{add, sq};
    std::string y;
    // x / sqrt
    for (const onnx::NodeProto *d : g.consumers(s))
      if (isOp(*d, "Div") && d->input_size() == 2 && d->input(1) == s &&
          d->input(0) == x) {
        nodes.push_back(d);
        y = d->output(0);
        break;
      }
    if (y.empty()) {
      // r = Reciprocal(sqrt) | Div(1, sqrt); y = x * r
      std::string r;
      const onnx::NodeProto *rn = consumer(g, s, "Reciprocal");
      if (!rn)
        for (const onnx::NodeProto *d : g.consumers(s))
          if (isOp(*d, "Div") && d->input_size() == 2 && d->input(1) == s &&
              scalar(g, d->input(0)) == 1.0) {
            rn = d;
            break;
          }
      if (!rn)
        return std::nullopt;
      r = rn->output(0);
      const onnx::NodeProto *mul = consumer(g, r, "Mul");
      if (!mul || other(*mul, r) != x)
        return std::nullopt;
      nodes.push_back(rn);
      nodes.push_back(mul);
      y = mul->output(0);
    }
    out.epsilon = *eps;
    for (const onnx::NodeProto *n : nodes)
      take(n);
    return y;
  }

  /// A ReduceMean over the last axis of `v`'s square (Pow 2 or Mul v v).
  const onnx::NodeProto *meanOfSquare(const std::string &v,
                                      const onnx::NodeProto *&square) {
    for (const onnx::NodeProto *n : g.consumers(v)) {
      bool sq = (isOp(*n, "Pow") && n->input_size() == 2 && n->input(0) == v &&
                 scalar(g, n->input(1)) == 2.0) ||
                (isOp(*n, "Mul") && n->input_size() == 2 && n->input(0) == v &&
                 n->input(1) == v);
      if (!sq)
        continue;
      const onnx::NodeProto *rm = consumer(g, n->output(0), "ReduceMean");
      if (rm && reducesLastAxis(g, *rm)) {
        square = n;
        return rm;
      }
    }
    return nullptr;
  }

  /// The LayerNorm decomposition (torch below opset 17).
  FailureOr<bool> layerDecomposed() {
    const std::string x = out.output;
    for (const onnx::NodeProto *rm : g.consumers(x)) {
      if (!isOp(*rm, "ReduceMean") || !reducesLastAxis(g, *rm))
        continue;
      const std::string &mean = rm->output(0);
      const onnx::NodeProto *sub = nullptr;
      for (const onnx::NodeProto *c : g.consumers(mean))
        if (isOp(*c, "Sub") && c->input_size() == 2 && c->input(0) == x &&
            c->input(1) == mean)
          sub = c;
      if (!sub)
        continue;
      const std::string &d = sub->output(0);
      const onnx::NodeProto *square = nullptr;
      const onnx::NodeProto *var = meanOfSquare(d, square);
      if (!var)
        continue;
      size_t mark = out.nodes.size();
      auto y = rsqrtApply(var->output(0), d);
      if (!y) {
        out.nodes.resize(mark);
        continue;
      }
      anchor = rm;
      take(rm);
      take(sub);
      take(square);
      take(var);
      auto v = affine(*y, /*allowBias=*/true);
      if (failed(v))
        return failure();
      out.kind = NormKind::layer;
      out.output = *v;
      return true;
    }
    return false;
  }

  /// RMSNorm decomposed.
  FailureOr<bool> rmsDecomposed() {
    const std::string x = out.output;
    const onnx::NodeProto *square = nullptr;
    const onnx::NodeProto *ms = meanOfSquare(x, square);
    if (!ms)
      return false;
    auto y = rsqrtApply(ms->output(0), x);
    if (!y)
      return false;
    anchor = square;
    take(square);
    take(ms);
    auto v = affine(*y, /*allowBias=*/false);
    if (failed(v))
      return failure();
    out.kind = NormKind::rms;
    out.output = *v;
    return true;
  }
};

} // namespace

FailureOr<bool> mlir::moe::frontend::matchNorm(const OnnxGraph &g,
                                               llvm::StringRef input,
                                               llvm::StringRef paramPrefix,
                                               std::vector<ParamSpec> &params,
                                               NormMatch &out) {
  // Work on copies: a match that does not complete leaves the caller's
  // params and `out` untouched.
  std::vector<ParamSpec> found;
  NormMatch m{NormKind::layer, 1e-5, input.str(), {}};
  Matcher mt{g, paramPrefix, found, m};
  FailureOr<bool> r = mt.fused();
  if (succeeded(r) && !*r) {
    m = NormMatch{NormKind::layer, 1e-5, input.str(), {}};
    r = mt.layerDecomposed();
  }
  if (succeeded(r) && !*r) {
    m = NormMatch{NormKind::layer, 1e-5, input.str(), {}};
    r = mt.rmsDecomposed();
  }
  if (failed(r) || !*r)
    return r;
  // A node can be recorded twice (a Constant feeding two matched nodes).
  std::vector<const onnx::NodeProto *> unique;
  for (const onnx::NodeProto *n : m.nodes)
    if (std::find(unique.begin(), unique.end(), n) == unique.end())
      unique.push_back(n);
  m.nodes = std::move(unique);
  out = std::move(m);
  params.insert(params.end(), found.begin(), found.end());
  return true;
}
