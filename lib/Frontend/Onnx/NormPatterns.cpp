//===- NormPatterns.cpp - LayerNorm / RMSNorm in their ONNX spellings -----===//
//
// matchNorm recognises a norm that reads `input`:
//   - fused: LayerNormalization (ai.onnx, opset 17), RMSNormalization
//     (opset 23), SimplifiedLayerNormalization (com.microsoft);
//   - decomposed, in any order of its factors. The statistics are found
//     structurally:
//       layer: m = ReduceMean(x); d = x - m; t = ReduceMean(d²) + eps
//       rms:   d = x;                        t = ReduceMean(x²) + eps
//     (x² as Pow(x, 2) or Mul(x, x); fp32 -> fp32 Casts of x anywhere);
//     then the normalised, scaled value is the first value downstream of t
//     whose product of factors (Mul, Div, Reciprocal, Sqrt, Pow by a
//     constant, no-op Cast) is exactly  d · t^(-1/2) · w  with w a 1-D
//     initializer, followed (layer) by an optional Add of a 1-D bias.
//     So `w * (x * rsqrt(t))` (HF), `(w * x) * rsqrt(t)` (weight first),
//     `x / sqrt(t) * w` and `x * (1 / sqrt(t)) * w` are all the same norm —
//     they are the same function up to float rounding, which the ONNX
//     Runtime validation (python/onnx_models/validate_import.py) checks on
//     the weight-first models.
// The reduction must be over the last axis (keepdims), which is what
// `moe.norm` computes; anything else is "not a norm" (false) and the caller
// reports the node. Scale and bias must be initializers: they become
// `<prefix>.scale` / `<prefix>.bias`. NormMatch::nodes lists exactly the
// nodes the norm computes (statistics, factors, casts, bias Add).
//
//===----------------------------------------------------------------------===//

#include "Patterns.h"

#include <cmath>
#include <deque>
#include <map>
#include <set>

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

/// A product of powers of named factors times a constant coefficient.
struct Monomial {
  std::map<std::string, double> powers;
  double coefficient = 1.0;
  std::vector<const onnx::NodeProto *> nodes;
};

struct Matcher {
  const OnnxGraph &g;
  llvm::StringRef prefix;
  std::vector<ParamSpec> &params;
  NormMatch &out;

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
      out.nodes = {n};
      out.output = n->output(0);
      return true;
    }
    return false;
  }

  /// `x` and the no-op Casts of it (HF upcasts to float32 first).
  std::vector<std::string> bases(const std::string &x,
                                 std::map<std::string, const onnx::NodeProto *>
                                     &castOf) const {
    std::vector<std::string> out{x};
    for (size_t i = 0; i < out.size() && i < 8; ++i)
      for (const onnx::NodeProto *c : g.consumers(out[i]))
        if (isNoOpCast(*c)) {
          out.push_back(c->output(0));
          castOf[c->output(0)] = c;
        }
    return out;
  }

  /// t = ReduceMean(u²) + eps with u one of `us`: the Add and the nodes.
  const onnx::NodeProto *meanSquarePlusEps(
      const std::vector<std::string> &us,
      std::vector<const onnx::NodeProto *> &nodes, double &eps) const {
    for (const std::string &u : us)
      for (const onnx::NodeProto *sq : g.consumers(u)) {
        bool square =
            (isOp(*sq, "Pow") && sq->input_size() == 2 && sq->input(0) == u &&
             scalar(g, sq->input(1)) == 2.0) ||
            (isOp(*sq, "Mul") && sq->input_size() == 2 && sq->input(0) == u &&
             sq->input(1) == u);
        if (!square)
          continue;
        for (const onnx::NodeProto *rm : g.consumers(sq->output(0))) {
          if (!isOp(*rm, "ReduceMean") || !reducesLastAxis(g, *rm))
            continue;
          for (const onnx::NodeProto *add : g.consumers(rm->output(0))) {
            if (!isOp(*add, "Add") || add->input_size() != 2)
              continue;
            std::string other = add->input(0) == rm->output(0)
                                    ? add->input(1)
                                    : add->input(0);
            auto e = scalar(g, other);
            if (!e || *e < 0)
              continue;
            eps = *e;
            nodes = {sq, rm, add};
            return add;
          }
        }
      }
    return nullptr;
  }

  /// The factors of `v`: leaves are `leafOf` entries (the centred value,
  /// t), 1-D initializers and other values (unknown factors, named); inner
  /// nodes are Mul, Div, Reciprocal, Sqrt, Pow by a constant and no-op
  /// Casts. nullopt when `v` is not such a product.
  std::optional<Monomial>
  factors(const std::string &v, const std::map<std::string, std::string> &leafOf,
          int depth = 0) const {
    Monomial m;
    if (auto it = leafOf.find(v); it != leafOf.end()) {
      m.powers[it->second] = 1;
      return m;
    }
    if (auto c = scalar(g, v)) {
      m.coefficient = *c;
      return m;
    }
    const onnx::NodeProto *p = g.producer(v);
    if (depth > 12 || !p || g.isInitializer(v)) {
      m.powers["value:" + v] = 1;
      return m;
    }
    auto sub = [&](int i) { return factors(p->input(i), leafOf, depth + 1); };
    auto merge = [&](Monomial a, const Monomial &b, double sign) {
      for (auto &[k, e] : b.powers)
        a.powers[k] += sign * e;
      a.coefficient *= sign > 0 ? b.coefficient : 1.0 / b.coefficient;
      a.nodes.insert(a.nodes.end(), b.nodes.begin(), b.nodes.end());
      return a;
    };
    std::optional<Monomial> r;
    if ((isOp(*p, "Mul") || isOp(*p, "Div")) && p->input_size() == 2) {
      auto a = sub(0), b = sub(1);
      if (a && b)
        r = merge(*a, *b, isOp(*p, "Mul") ? 1.0 : -1.0);
    } else if (isOp(*p, "Reciprocal") || isOp(*p, "Sqrt") ||
               (isOp(*p, "Pow") && p->input_size() == 2) || isNoOpCast(*p)) {
      double e = isOp(*p, "Reciprocal") ? -1.0
                 : isOp(*p, "Sqrt")     ? 0.5
                                        : 1.0;
      if (isOp(*p, "Pow")) {
        auto c = scalar(g, p->input(1));
        if (!c)
          return std::nullopt;
        e = *c;
      }
      auto a = sub(0);
      if (a) {
        r = *a;
        for (auto &[k, pw] : r->powers)
          pw *= e;
        r->coefficient = std::pow(r->coefficient, e);
      }
    } else {
      m.powers["value:" + v] = 1;
      return m;
    }
    if (r)
      r->nodes.push_back(p);
    return r;
  }

  /// The decompositions (layer when `layer`, else rms) reading out.output.
  FailureOr<bool> decomposed(bool layer) {
    const std::string x = out.output;
    std::map<std::string, const onnx::NodeProto *> castOf;
    std::vector<std::string> xs = bases(x, castOf);
    std::vector<const onnx::NodeProto *> stats;
    std::map<std::string, std::string> leafOf;
    std::string center;
    if (layer) {
      for (const std::string &b : xs) {
        for (const onnx::NodeProto *rm : g.consumers(b)) {
          if (!isOp(*rm, "ReduceMean") || !reducesLastAxis(g, *rm))
            continue;
          for (const onnx::NodeProto *sub : g.consumers(rm->output(0)))
            if (isOp(*sub, "Sub") && sub->input_size() == 2 &&
                sub->input(1) == rm->output(0) &&
                llvm::is_contained(xs, sub->input(0))) {
              center = sub->output(0);
              stats = {rm, sub};
            }
          if (!center.empty())
            break;
        }
        if (!center.empty())
          break;
      }
      if (center.empty())
        return false;
      leafOf[center] = "center";
    } else {
      for (const std::string &b : xs)
        leafOf[b] = "center";
    }
    std::vector<std::string> us = layer ? std::vector<std::string>{center} : xs;
    if (layer) {
      std::map<std::string, const onnx::NodeProto *> more;
      us = bases(center, more);
      castOf.insert(more.begin(), more.end());
    }
    std::vector<const onnx::NodeProto *> ms;
    double eps = 0;
    const onnx::NodeProto *add = meanSquarePlusEps(us, ms, eps);
    if (!add)
      return false;
    stats.insert(stats.end(), ms.begin(), ms.end());
    const std::string t = add->output(0);
    leafOf[t] = "t";

    // Breadth-first from t through factor ops: the first value that is
    // centre · t^-1/2 · (one more factor) is the scaled norm output.
    std::deque<std::pair<std::string, int>> work{{t, 0}};
    std::set<std::string> seen{t};
    while (!work.empty()) {
      auto [v, depth] = work.front();
      work.pop_front();
      if (depth > 8)
        continue;
      for (const onnx::NodeProto *c : g.consumers(v)) {
        bool factorOp = isOp(*c, "Mul") || isOp(*c, "Div") ||
                        isOp(*c, "Reciprocal") || isOp(*c, "Sqrt") ||
                        isOp(*c, "Pow") || isNoOpCast(*c);
        if (!factorOp || c->output_size() != 1)
          continue;
        const std::string &o = c->output(0);
        if (!seen.insert(o).second)
          continue;
        auto m = factors(o, leafOf);
        if (m && std::abs(m->coefficient - 1.0) < 1e-6 &&
            m->powers.size() == 3 && m->powers["center"] == 1.0 &&
            m->powers["t"] == -0.5) {
          std::string w;
          for (auto &[k, e] : m->powers)
            if (llvm::StringRef(k).starts_with("value:") && e == 1.0)
              w = k.substr(6);
          if (!w.empty())
            return finish(layer, eps, stats, *m, w, o, castOf);
        }
        work.push_back({o, depth + 1});
      }
    }
    return false;
  }

  FailureOr<bool>
  finish(bool layer, double eps, std::vector<const onnx::NodeProto *> nodes,
         const Monomial &m, const std::string &w, std::string output,
         const std::map<std::string, const onnx::NodeProto *> &castOf) {
    // The node that reads the scale, for messages.
    const onnx::NodeProto *reader = nullptr;
    for (const onnx::NodeProto *n : m.nodes)
      for (const std::string &i : n->input())
        if (i == w)
          reader = n;
    if (failed(addParam("scale", w, *reader)))
      return failure();
    nodes.insert(nodes.end(), m.nodes.begin(), m.nodes.end());
    for (const auto &entry : castOf) {
      const std::string &v = entry.first;
      const onnx::NodeProto *c = entry.second;
      if (llvm::is_contained(nodes, c) ||
          llvm::any_of(nodes, [&](const onnx::NodeProto *n) {
            return llvm::is_contained(n->input(), v);
          }))
        nodes.push_back(c);
    }
    if (layer) {
      for (const onnx::NodeProto *add : g.consumers(output)) {
        if (!isOp(*add, "Add") || add->input_size() != 2)
          continue;
        std::string b = add->input(0) == output ? add->input(1) : add->input(0);
        auto s = g.shape(b);
        if (g.isInitializer(b) && s && s->size() == 1) {
          if (failed(addParam("bias", b, *add)))
            return failure();
          nodes.push_back(add);
          output = add->output(0);
        }
        break;
      }
    }
    // Every value inside the norm must be read only inside it: the op
    // computes the norm's output, nothing in between.
    std::set<const onnx::NodeProto *> mine(nodes.begin(), nodes.end());
    for (const onnx::NodeProto *n : nodes)
      for (const std::string &o : n->output())
        if (o != output)
          for (const onnx::NodeProto *c : g.consumers(o))
            if (!mine.count(c))
              return false;
    out.kind = layer ? NormKind::layer : NormKind::rms;
    out.epsilon = eps;
    out.output = output;
    out.nodes.assign(mine.begin(), mine.end());
    return true;
  }
};

} // namespace

bool mlir::moe::frontend::isNoOpCast(const onnx::NodeProto &n) {
  if (!isOp(n, "Cast") || n.input_size() != 1)
    return false;
  int64_t to = attrInt(n, "to", 0);
  return to == onnx::TensorProto::FLOAT || to == onnx::TensorProto::DOUBLE;
}

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
  for (bool layer : {true, false}) {
    if (failed(r) || *r)
      break;
    found.clear();
    m = NormMatch{NormKind::layer, 1e-5, input.str(), {}};
    r = mt.decomposed(layer);
  }
  if (failed(r) || !*r)
    return r;
  llvm::sort(m.nodes, [&](const onnx::NodeProto *a, const onnx::NodeProto *b) {
    return g.indexOf(*a) < g.indexOf(*b);
  });
  out = std::move(m);
  params.insert(params.end(), found.begin(), found.end());
  return true;
}
