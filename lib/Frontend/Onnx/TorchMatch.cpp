//===- TorchMatch.cpp - data-flow helpers for the PyTorch-export matchers -===//
//
// See TorchMatch.h: the matchers reason over data flow, not node sequences.
//
//===----------------------------------------------------------------------===//
#include "TorchMatch.h"

#include "StaticEval.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <set>

namespace mlir::moe::frontend::torchpat {

using onnx::NodeProto;

std::string blockPrefix(int blockIndex) {
  return "block" + std::to_string(blockIndex);
}

//===-- RegionView --------------------------------------------------------===//

RegionView::RegionView(const OnnxGraph &g, const Region &r) : g_(g), r_(r) {
  in_.insert(r.nodes.begin(), r.nodes.end());
}

const NodeProto *RegionView::prod(llvm::StringRef value) const {
  const NodeProto *p = g_.producer(value);
  return p && in_.count(p) ? p : nullptr;
}

std::vector<const NodeProto *> RegionView::ofType(llvm::StringRef op) const {
  std::vector<const NodeProto *> out;
  for (const NodeProto *n : r_.nodes)
    if (n->op_type() == op)
      out.push_back(n);
  return out;
}

std::vector<const NodeProto *> RegionView::users(llvm::StringRef value) const {
  std::vector<const NodeProto *> out;
  for (const NodeProto *n : g_.consumers(value))
    if (in_.count(n))
      out.push_back(n);
  return out;
}

std::unordered_set<std::string>
RegionView::forwardCone(const std::vector<std::string> &seeds) const {
  std::unordered_set<std::string> seen(seeds.begin(), seeds.end());
  std::deque<std::string> work(seeds.begin(), seeds.end());
  while (!work.empty()) {
    std::string v = work.front();
    work.pop_front();
    for (const NodeProto *n : users(v))
      for (const std::string &o : n->output())
        if (!o.empty() && seen.insert(o).second)
          work.push_back(o);
  }
  return seen;
}

std::vector<const NodeProto *> RegionView::backwardNodes(
    llvm::StringRef value,
    const std::function<bool(const NodeProto &)> &stop) const {
  std::vector<const NodeProto *> out;
  std::unordered_set<const NodeProto *> seen;
  std::deque<const NodeProto *> work;
  if (const NodeProto *p = prod(value))
    work.push_back(p);
  while (!work.empty()) {
    const NodeProto *n = work.front();
    work.pop_front();
    if (!seen.insert(n).second)
      continue;
    out.push_back(n);
    if (stop && stop(*n))
      continue;
    for (const std::string &i : n->input())
      if (!i.empty())
        if (const NodeProto *p = prod(i))
          work.push_back(p);
  }
  return out;
}

//===-- constants ---------------------------------------------------------===//

std::optional<double> scalarConst(const OnnxGraph &g, llvm::StringRef value) {
  for (int i = 0; i < 8; ++i) {
    if (auto f = g.floatValues(value); f && f->size() == 1)
      return (*f)[0];
    if (auto v = g.intValues(value); v && v->size() == 1)
      return static_cast<double>((*v)[0]);
    const NodeProto *p = g.producer(value);
    if (!p || p->input_size() < 1 ||
        (p->op_type() != "Cast" && p->op_type() != "Identity"))
      return std::nullopt;
    value = p->input(0);
  }
  return std::nullopt;
}

bool isConstantValue(const OnnxGraph &g, llvm::StringRef value, int depth) {
  if (g.constant(value))
    return true;
  const NodeProto *p = g.producer(value);
  if (!p || depth > 24)
    return false;
  if (p->op_type() == "Shape") {
    auto s = g.shape(p->input(0));
    return s && llvm::all_of(*s, [](int64_t d) { return d >= 0; });
  }
  if (p->op_type() == "ConstantOfShape" || p->op_type() == "Range" ||
      p->op_type() == "Constant")
    return p->input_size() == 0 || isConstantValue(g, p->input(0), depth + 1);
  for (const std::string &i : p->input())
    if (!i.empty() && !isConstantValue(g, i, depth + 1))
      return false;
  return p->input_size() > 0;
}

std::optional<int64_t> rankOf(const OnnxGraph &g, llvm::StringRef value,
                              int depth) {
  if (auto s = g.shape(value))
    return static_cast<int64_t>(s->size());
  if (const onnx::TensorProto *t = g.constant(value))
    return t->dims_size();
  const NodeProto *p = g.producer(value);
  if (!p || depth > 48 || p->input_size() < 1)
    return std::nullopt;
  llvm::StringRef op = p->op_type();
  auto in = [&](int i) { return rankOf(g, p->input(i), depth + 1); };
  if (op == "Reshape") {
    auto target = evalInts(g, p->input(1));
    if (target)
      return static_cast<int64_t>(target->size());
    return std::nullopt;
  }
  if (op == "OneHot") {
    auto r = in(0);
    return r ? std::optional<int64_t>(*r + 1) : std::nullopt;
  }
  if (op == "ArgMax" || op == "ArgMin" || op == "ReduceMax" ||
      op == "ReduceSum" || op == "ReduceMean") {
    auto r = in(0);
    if (!r || attrInt(*p, "keepdims", 1))
      return r;
    int64_t axes = op.starts_with("Arg") ? 1
                   : hasAttr(*p, "axes")
                       ? static_cast<int64_t>(attrInts(*p, "axes").size())
                       : -1;
    if (axes < 0)
      return std::nullopt;
    return *r - axes;
  }
  if (op == "Gather" && p->input_size() == 2) {
    auto d = in(0), i = in(1);
    return d && i ? std::optional<int64_t>(*d + *i - 1) : std::nullopt;
  }
  static const llvm::StringSet<> sameRank = {
      "Cast", "Identity", "Softmax", "Sigmoid", "TopK", "Transpose", "Relu",
      "Neg", "Clip", "CumSum", "Not", "Sqrt", "Exp", "Log", "Abs"};
  if (sameRank.contains(op))
    return in(0);
  static const llvm::StringSet<> broadcast = {
      "Add", "Sub", "Mul", "Div", "Less", "LessOrEqual", "Greater",
      "GreaterOrEqual", "Equal", "And", "Or", "Where", "Max", "Min",
      "MatMul", "Pow"};
  if (broadcast.contains(op)) {
    std::optional<int64_t> r;
    for (int i = 0; i < p->input_size(); ++i) {
      auto ri = in(i);
      if (!ri)
        return std::nullopt;
      r = std::max(r.value_or(0), *ri);
    }
    return r;
  }
  return std::nullopt;
}

static int64_t clampIndex(int64_t i, int64_t n) {
  if (i < 0)
    i += n;
  return std::clamp<int64_t>(i, 0, n);
}

std::optional<std::vector<int64_t>> evalInts(const OnnxGraph &g,
                                             llvm::StringRef value,
                                             int depth) {
  if (auto v = g.intValues(value))
    return v;
  if (auto f = g.floatValues(value)) {
    std::vector<int64_t> out;
    for (double d : *f) {
      if (d != std::floor(d))
        return std::nullopt;
      out.push_back(static_cast<int64_t>(d));
    }
    return out;
  }
  const NodeProto *p = g.producer(value);
  if (!p || depth > 32)
    return std::nullopt;
  llvm::StringRef op = p->op_type();
  auto in = [&](int i) -> std::optional<std::vector<int64_t>> {
    if (i >= p->input_size() || p->input(i).empty())
      return std::nullopt;
    return evalInts(g, p->input(i), depth + 1);
  };
  if (op == "Shape") {
    auto s = g.shape(p->input(0));
    if (!s || llvm::any_of(*s, [](int64_t d) { return d < 0; }))
      return std::nullopt;
    int64_t n = s->size();
    int64_t b = clampIndex(attrInt(*p, "start", 0), n);
    int64_t e = clampIndex(attrInt(*p, "end", n), n);
    return std::vector<int64_t>(s->begin() + b, s->begin() + std::max(b, e));
  }
  if (op == "Identity" || op == "Cast" || op == "Squeeze" ||
      op == "Unsqueeze" || op == "Reshape" || op == "Flatten")
    return in(0); // 1-D shape vectors and scalars: same values
  if (op == "Concat") {
    std::vector<int64_t> out;
    for (int i = 0; i < p->input_size(); ++i) {
      auto v = in(i);
      if (!v)
        return std::nullopt;
      out.insert(out.end(), v->begin(), v->end());
    }
    return out;
  }
  if (op == "Gather") {
    auto data = in(0), idx = in(1);
    if (!data || !idx)
      return std::nullopt;
    std::vector<int64_t> out;
    for (int64_t i : *idx) {
      if (i < 0)
        i += data->size();
      if (i < 0 || i >= static_cast<int64_t>(data->size()))
        return std::nullopt;
      out.push_back((*data)[i]);
    }
    return out;
  }
  if (op == "Slice") {
    auto data = in(0), st = in(1), en = in(2);
    if (!data || !st || !en || st->size() != 1 || en->size() != 1)
      return std::nullopt;
    int64_t n = data->size();
    int64_t b = clampIndex((*st)[0], n), e = clampIndex((*en)[0], n);
    if (p->input_size() > 4) {
      auto step = in(4);
      if (!step || step->size() != 1 || (*step)[0] != 1)
        return std::nullopt;
    }
    return std::vector<int64_t>(data->begin() + b,
                                data->begin() + std::max(b, e));
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    auto a = in(0), b = in(1);
    if (!a || !b || (a->size() != b->size() && a->size() != 1 &&
                     b->size() != 1))
      return std::nullopt;
    size_t n = std::max(a->size(), b->size());
    std::vector<int64_t> out(n);
    for (size_t i = 0; i < n; ++i) {
      int64_t x = (*a)[a->size() == 1 ? 0 : i];
      int64_t y = (*b)[b->size() == 1 ? 0 : i];
      if (op == "Add")
        out[i] = x + y;
      else if (op == "Sub")
        out[i] = x - y;
      else if (op == "Mul")
        out[i] = x * y;
      else {
        if (y == 0)
          return std::nullopt;
        out[i] = x / y; // torch's shape arithmetic is floor division
      }
    }
    return out;
  }
  return std::nullopt;
}

//===-- weight projections ------------------------------------------------===//

/// The initializer behind `value`, through Identity (torch ties weights that
/// way): its name, or empty.
std::string initializerOf(const OnnxGraph &g, std::string value) {
  for (int i = 0; i < 4; ++i) {
    if (g.isInitializer(value))
      return value;
    const NodeProto *p = g.producer(value);
    if (!p || p->op_type() != "Identity")
      return "";
    value = p->input(0);
  }
  return "";
}

namespace {

/// The nodes between initializer `init` and `value` (those `value` is
/// computed from that read `init`, directly or not), in graph order.
std::vector<const NodeProto *> chainFrom(const OnnxGraph &g,
                                         llvm::StringRef init,
                                         llvm::StringRef value) {
  std::map<std::string, bool> reads; // value -> computed from init
  std::set<const NodeProto *> nodes;
  std::function<bool(const std::string &, int)> visit =
      [&](const std::string &v, int depth) -> bool {
    if (v == init)
      return true;
    if (auto it = reads.find(v); it != reads.end())
      return it->second;
    const NodeProto *p = g.producer(v);
    bool r = false;
    if (p && depth < 48)
      for (const std::string &i : p->input())
        if (!i.empty() && visit(i, depth + 1))
          r = true;
    if (r)
      nodes.insert(p);
    return reads[v] = r;
  };
  visit(value.str(), 0);
  std::vector<const NodeProto *> out(nodes.begin(), nodes.end());
  llvm::sort(out, [&](const NodeProto *a, const NodeProto *b) {
    return g.indexOf(*a) < g.indexOf(*b);
  });
  return out;
}

/// A MatMul weight operand `b` computed from one 2-D initializer [R, C] by
/// movement ops only, that is a block of its consecutive rows [r0, r0 + k)
/// (k x C) or that block transposed (C x k): DBRX's experts, which view one
/// (E·F) x M parameter as E x F x M and chunk it per expert. Decided by
/// value: `b` is evaluated with the initializer replaced by the indices of
/// its elements (StaticEval::probe), so any movement chain that selects such
/// a block qualifies and nothing else does. Bounded by StaticEval's
/// kMaxElements (larger parameters are not recognised, and refused).
std::optional<WeightUse> rowBlockWeight(const OnnxGraph &g,
                                        const NodeProto &node,
                                        const std::string &b) {
  if (node.op_type() != "MatMul" || g.isInitializer(b) ||
      !isConstantValue(g, b))
    return std::nullopt;
  if (isConstantValue(g, node.input(0)))
    return std::nullopt;
  std::string init;
  // The one initializer among b's ancestors.
  std::vector<std::string> todo{b};
  std::set<std::string> seen, inits;
  while (!todo.empty() && seen.size() < 256) {
    std::string v = todo.back();
    todo.pop_back();
    if (!seen.insert(v).second)
      continue;
    if (g.isInitializer(v)) {
      if (auto s = g.shape(v); s && s->size() == 2)
        inits.insert(v);
      continue;
    }
    if (const NodeProto *p = g.producer(v))
      for (const std::string &i : p->input())
        if (!i.empty())
          todo.push_back(i);
  }
  if (inits.size() != 1)
    return std::nullopt;
  init = *inits.begin();
  std::vector<int64_t> is = *g.shape(init);
  int64_t rows = is[0], cols = is[1];
  if (rows * cols > StaticEval::kMaxElements)
    return std::nullopt;
  StaticTensor index;
  index.shape = is;
  index.data.resize(size_t(rows * cols));
  for (size_t i = 0; i < index.data.size(); ++i)
    index.data[i] = double(i);
  StaticEval eval(g);
  std::optional<StaticTensor> t = eval.probe({{init, index}}, b);
  if (!t || t->shape.size() != 2 || t->numel() == 0)
    return std::nullopt;
  int64_t a = t->shape[0], c = t->shape[1];
  auto at = [&](int64_t i, int64_t j) { return int64_t(t->data[i * c + j]); };
  // Rows [r0, r0 + a) as they are, or rows [r0, r0 + c) transposed.
  bool plain = c == cols, transposed = a == cols;
  int64_t r0 = at(0, 0) / cols;
  for (int64_t i = 0; i < a && (plain || transposed); ++i)
    for (int64_t j = 0; j < c; ++j) {
      plain = plain && at(i, j) == (r0 + i) * cols + j;
      transposed = transposed && at(i, j) == (r0 + j) * cols + i;
    }
  if (!plain && !transposed)
    return std::nullopt;
  WeightUse w;
  w.node = &node;
  w.data = node.input(0);
  w.source.initializers = {init};
  attachFile(g, w.source);
  w.source.transpose = !plain;
  w.source.sliceAxis = 0;
  w.source.sliceBegin = r0;
  w.source.sliceSize = plain ? a : c;
  w.shape = {a, c};
  w.chain = chainFrom(g, init, b);
  return w;
}

} // namespace

std::optional<WeightUse> weightUse(const OnnxGraph &g, const NodeProto &node) {
  llvm::StringRef op = node.op_type();
  if ((op != "MatMul" && op != "Gemm" && op != "Einsum") ||
      node.input_size() < 2)
    return std::nullopt;
  WeightUse w;
  w.node = &node;
  w.data = node.input(0);
  std::string b = node.input(1);
  bool transposed = false;
  if (op == "Gemm") {
    if (attrInt(node, "transA", 0))
      return std::nullopt;
    transposed = attrInt(node, "transB", 0) != 0;
  }
  std::string init = initializerOf(g, b);
  std::vector<int64_t> perm;
  if (init.empty()) {
    const NodeProto *t = g.producer(b);
    if (t && t->op_type() == "Transpose")
      init = initializerOf(g, t->input(0));
    if (init.empty())
      return rowBlockWeight(g, node, b);
    perm = attrInts(*t, "perm");
    transposed = !transposed;
  }
  auto s = g.shape(init);
  if (!s)
    return std::nullopt;
  w.source.initializers = {init};
  attachFile(g, w.source);
  if (s->size() == 2 && op != "Einsum") {
    if (!perm.empty() && perm != std::vector<int64_t>{1, 0})
      return std::nullopt;
    w.source.transpose = transposed;
    w.shape = transposed ? std::vector<int64_t>{(*s)[1], (*s)[0]} : *s;
    return w;
  }
  if (s->size() != 3)
    return std::nullopt;
  // Stacked experts [E, a, b]: used as x[E, T, a] @ W or an einsum whose
  // contracted letter says which of a, b is the input side.
  if (!perm.empty()) {
    if (perm != std::vector<int64_t>{0, 2, 1})
      return std::nullopt;
  }
  if (op == "Einsum") {
    std::string eq = attrString(node, "equation");
    eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
    size_t comma = eq.find(','), arrow = eq.find("->");
    if (comma == std::string::npos || arrow == std::string::npos ||
        !perm.empty())
      return std::nullopt;
    std::string lhs = eq.substr(0, comma),
                rhs = eq.substr(comma + 1, arrow - comma - 1),
                res = eq.substr(arrow + 2);
    if (rhs.size() != 3 || res.size() != 3 || lhs.size() != 3 ||
        lhs[0] != rhs[0] || res[0] != rhs[0])
      return std::nullopt;
    // The letter shared by both operands but not in the result is summed.
    int contracted = -1;
    for (int i = 1; i < 3; ++i)
      if (lhs.find(rhs[i]) != std::string::npos &&
          res.find(rhs[i]) == std::string::npos)
        contracted = i;
    if (contracted < 0 || lhs.find(rhs[3 - contracted]) != std::string::npos)
      return std::nullopt;
    transposed = contracted == 2;
  }
  w.source.transpose = transposed;
  w.shape = transposed ? std::vector<int64_t>{(*s)[0], (*s)[2], (*s)[1]} : *s;
  return w;
}

LogicalResult rejectBiases(const RegionView &rv, llvm::StringRef sublayer) {
  const OnnxGraph &g = rv.graph();
  for (const NodeProto *n : rv.region().nodes) {
    if (n->op_type() == "Gemm" && n->input_size() > 2 &&
        !n->input(2).empty()) {
      g.error(*n) << "Linear bias '" << n->input(2) << "' in the " << sublayer
                  << " is not supported: moe " << sublayer
                  << " projections have no bias (export with bias=False)";
      return failure();
    }
    if (n->op_type() != "Add" || n->input_size() != 2)
      continue;
    for (int i = 0; i < 2; ++i) {
      const NodeProto *p = g.producer(n->input(1 - i));
      // nn.MultiheadAttention adds the bias after slicing the packed
      // projection, so look through Slice / Reshape too.
      for (int hop = 0; p && hop < 3 &&
                        (p->op_type() == "Slice" || p->op_type() == "Reshape" ||
                         p->op_type() == "Transpose");
           ++hop)
        p = g.producer(p->input(0));
      std::string bias = initializerOf(g, n->input(i));
      auto s = bias.empty() ? std::nullopt : g.shape(bias);
      if (p && weightUse(g, *p) && s && s->size() == 1) {
        g.error(*n) << "Linear bias '" << bias << "' in the " << sublayer
                    << " is not supported: moe " << sublayer
                    << " projections have no bias (export with bias=False)";
        return failure();
      }
    }
  }
  return success();
}

//===-- FFNs --------------------------------------------------------------===//

int64_t FfnMatch::hidden() const { return up ? up->shape.back() : 0; }

static bool isActivationOp(llvm::StringRef op) {
  return op == "Relu" || op == "Erf" || op == "Tanh" || op == "Gelu" ||
         op == "Sigmoid" || op == "FastGelu" || op == "BiasGelu";
}

FailureOr<std::vector<FfnMatch>>
groupFfns(const RegionView &rv, const std::vector<WeightUse> &projections) {
  const OnnxGraph &g = rv.graph();
  std::map<const NodeProto *, const WeightUse *> byNode;
  for (const WeightUse &w : projections)
    byNode[w.node] = &w;
  auto isProj = [&](const NodeProto &n) { return byNode.count(&n) > 0; };

  std::vector<FfnMatch> out;
  std::map<const NodeProto *, const NodeProto *> usedBy;
  for (const WeightUse &w : projections) {
    auto cone = rv.backwardNodes(w.data, isProj);
    std::vector<const WeightUse *> firsts;
    std::vector<const NodeProto *> acts;
    for (const NodeProto *n : cone) {
      if (isProj(*n))
        firsts.push_back(byNode[n]);
      else if (isActivationOp(n->op_type()))
        acts.push_back(n);
    }
    if (firsts.empty())
      continue; // a first-layer projection
    if (firsts.size() > 2) {
      g.error(*w.node) << "projection '" << w.source.initializers[0]
                       << "' reads " << firsts.size()
                       << " projections; expected an FFN's up (and gate)";
      return failure();
    }
    FfnMatch f;
    f.down = w;
    for (const WeightUse *p : firsts) {
      if (usedBy.count(p->node)) {
        g.error(*p->node) << "projection '" << p->source.initializers[0]
                          << "' feeds more than one down projection";
        return failure();
      }
      usedBy[p->node] = w.node;
    }
    if (acts.empty()) {
      // Nothing recognisable by op type: probeActivation evaluates what
      // lies between and names it.
      f.up = *firsts[0];
      if (firsts.size() == 2)
        f.gate = *firsts[1];
      out.push_back(std::move(f));
      continue;
    }
    // Which activation, and which projection it is applied to.
    std::unordered_set<std::string> kinds;
    const WeightUse *activated = nullptr;
    for (const NodeProto *a : acts) {
      llvm::StringRef op = a->op_type();
      kinds.insert(op == "Relu" ? "relu" : op == "Sigmoid" ? "silu" : "gelu");
      auto back = rv.backwardNodes(a->input(0), isProj);
      for (const WeightUse *p : firsts)
        if (llvm::is_contained(back, p->node)) {
          if (activated && activated != p) {
            g.error(*a) << "activations applied to both projections feeding '"
                        << w.source.initializers[0] << "'";
            return failure();
          }
          activated = p;
        }
    }
    if (kinds.size() != 1 || !activated) {
      g.error(*acts.front())
          << "cannot classify the FFN activation before '"
          << w.source.initializers[0] << "'";
      return failure();
    }
    std::string k = *kinds.begin();
    f.activation = k == "relu"   ? Activation::relu
                   : k == "silu" ? Activation::silu
                                 : Activation::gelu;
    if (firsts.size() == 2) {
      f.gate = *activated;
      f.up = *(firsts[0] == activated ? firsts[1] : firsts[0]);
    } else {
      f.up = *activated;
    }
    // Shapes must chain: up/gate in x H, down H x out.
    int64_t h = f.up->shape.back();
    if ((f.gate && f.gate->shape != f.up->shape) ||
        f.down.shape[f.down.shape.size() - 2] != h) {
      g.error(*w.node) << "FFN weight shapes do not chain (up/gate width "
                       << h << ", down '" << w.source.initializers[0]
                       << "' input " << f.down.shape[f.down.shape.size() - 2]
                       << ")";
      return failure();
    }
    out.push_back(std::move(f));
  }
  for (const WeightUse &w : projections) {
    bool isDown = llvm::any_of(out, [&](const FfnMatch &f) {
      return f.down.node == w.node;
    });
    if (!isDown && !usedBy.count(w.node)) {
      g.error(*w.node) << "projection '" << w.source.initializers[0]
                       << "' is not part of an up -> activation -> down FFN";
      return failure();
    }
  }
  llvm::sort(out, [&](const FfnMatch &a, const FfnMatch &b) {
    return g.indexOf(*a.down.node) < g.indexOf(*b.down.node);
  });
  return out;
}

std::vector<const NodeProto *> projectionNodes(const RegionView &rv,
                                              const WeightUse &w) {
  std::vector<const NodeProto *> out{w.node};
  std::string v = w.node->input(1);
  for (int hop = 0; hop < 4; ++hop) {
    const NodeProto *p = rv.prod(v);
    if (!p || (p->op_type() != "Transpose" && p->op_type() != "Identity"))
      break;
    out.push_back(p);
    v = p->input(0);
  }
  return out;
}

std::vector<const NodeProto *> ffnInner(const RegionView &rv,
                                        const FfnMatch &f) {
  std::vector<const NodeProto *> out;
  auto stop = [&](const NodeProto &n) {
    return &n == f.up->node || (f.gate && &n == f.gate->node);
  };
  for (const NodeProto *n : rv.backwardNodes(f.down.data, stop))
    if (!stop(*n))
      out.push_back(n);
  return out;
}

namespace {
double geluErf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double geluTanh(double x) {
  return 0.5 * x *
         (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu(double x) { return x / (1.0 + std::exp(-x)); }
double relu(double x) { return x > 0 ? x : 0.0; }
} // namespace

LogicalResult probeActivation(StaticEval &eval, const RegionView &rv,
                              FfnMatch &f) {
  const OnnxGraph &g = rv.graph();
  int64_t h = f.hidden();
  if (h <= 0 || h > StaticEval::kMaxElements / 4) {
    g.error(*f.down.node) << "FFN hidden size " << h
                          << " is out of range for evaluating its activation";
    return failure();
  }
  auto rank = rankOf(g, f.up->node->output(0));
  std::vector<int64_t> shape(std::clamp<int64_t>(rank.value_or(2), 1, 8) - 1,
                             1);
  shape.push_back(h);
  StaticTensor u, gt;
  u.shape = gt.shape = shape;
  for (int64_t i = 0; i < h; ++i) {
    double t = h > 1 ? double(i) / double(h - 1) : 0.5;
    u.data.push_back(-6.0 + 12.0 * t);
    gt.data.push_back(5.0 - 9.5 * t * t);
  }
  std::map<std::string, StaticTensor> in{{f.up->node->output(0), u}};
  if (f.gate)
    in[f.gate->node->output(0)] = gt;
  auto y = eval.probe(in, f.down.data);
  if (!y || int64_t(y->data.size()) != h) {
    static const llvm::StringSet<> known = {
        "Mul", "Div", "Add", "Sub", "Erf", "Tanh", "Sigmoid", "Relu", "Pow",
        "Neg", "Exp", "Identity", "Cast", "Reshape", "Constant"};
    const NodeProto *culprit = nullptr;
    for (const NodeProto *n : ffnInner(rv, f))
      if (!known.contains(n->op_type()))
        culprit = n;
    InFlightDiagnostic d = g.error(culprit ? *culprit : *f.down.node);
    d << "the FFN before '" << f.down.source.initializers[0] << "' applies ";
    if (culprit)
      d << culprit->op_type() << ", which is";
    else
      d << "something that is";
    d << " not one of the moe dialect's activations (relu, gelu, silu)";
    return failure();
  }
  struct Act {
    Activation kind;
    double (*fn)(double);
  };
  const Act acts[] = {{Activation::relu, relu},
                      {Activation::gelu, geluErf},
                      {Activation::silu, silu}};
  auto matches = [&](double (*fn)(double), bool swapped) {
    for (int64_t i = 0; i < h; ++i) {
      double a = swapped ? u.data[i] : gt.data[i];
      double b = swapped ? gt.data[i] : u.data[i];
      double want = f.gate ? fn(a) * b : fn(u.data[i]);
      // fp32 constants (sqrt(2), 0.5) evaluated in double: ~1e-8 off;
      // GELU's tanh approximation is ~1e-4 off.
      if (std::fabs(y->data[i] - want) > 1e-6 * (1.0 + std::fabs(want)))
        return false;
    }
    return true;
  };
  for (bool swapped : {false, true}) {
    if (swapped && !f.gate)
      break;
    for (const Act &a : acts)
      if (matches(a.fn, swapped)) {
        f.activation = a.kind;
        if (swapped)
          std::swap(f.up, f.gate);
        return success();
      }
  }
  InFlightDiagnostic d = g.error(*f.down.node);
  d << "the FFN before '" << f.down.source.initializers[0] << "' computes ";
  if (matches(geluTanh, false) || (f.gate && matches(geluTanh, true)))
    d << "GELU with the tanh approximation, which is not the moe dialect's "
         "exact (erf) GELU";
  else
    d << "an activation that is none of relu, gelu (erf) and silu"
      << (f.gate ? " applied to one projection times the other" : "")
      << " (evaluated on probe values)";
  return failure();
}

static ParamSpec stackParam(const std::string &name,
                            const std::vector<const WeightUse *> &ws) {
  ParamSpec p;
  p.name = name;
  if (ws.size() == 1 && ws[0]->shape.size() == 3) {
    p.shape = ws[0]->shape; // already stacked [E, in, out]
    p.source = ws[0]->source;
    return p;
  }
  p.shape = ws[0]->shape;
  p.shape.insert(p.shape.begin(), static_cast<int64_t>(ws.size()));
  p.source = ws[0]->source;
  p.source.initializers.clear();
  for (const WeightUse *w : ws)
    p.source.initializers.push_back(w->source.initializers[0]);
  p.source.stacked = true;
  // Row blocks of one parameter (rowBlockWeight): expert n's begins n
  // strides after expert 0's (checked by the caller: expertSlicesOk).
  if (ws.size() > 1 && p.source.sliceAxis >= 0)
    p.source.sliceStride = ws[1]->source.sliceBegin - ws[0]->source.sliceBegin;
  return p;
}

bool expertSlicesOk(const std::vector<const WeightUse *> &ws) {
  if (ws.empty() || ws[0]->source.sliceAxis < 0)
    return llvm::all_of(
        ws, [](const WeightUse *w) { return w->source.sliceAxis < 0; });
  const WeightSource &s0 = ws[0]->source;
  int64_t stride =
      ws.size() > 1 ? ws[1]->source.sliceBegin - s0.sliceBegin : s0.sliceSize;
  for (size_t n = 0; n < ws.size(); ++n) {
    const WeightSource &s = ws[n]->source;
    if (s.sliceAxis != s0.sliceAxis || s.sliceSize != s0.sliceSize ||
        s.sliceBegin != s0.sliceBegin + int64_t(n) * stride || stride <= 0)
      return false;
  }
  return true;
}

void addFfnParams(const OnnxGraph &g, const std::vector<FfnMatch> &ffns,
                  bool stacked, const std::string &prefix,
                  std::vector<ParamSpec> &params) {
  (void)g;
  auto add = [&](const char *part, auto get) {
    std::vector<const WeightUse *> ws;
    for (const FfnMatch &f : ffns)
      ws.push_back(get(f));
    if (llvm::is_contained(ws, nullptr))
      return;
    if (stacked) {
      params.push_back(stackParam(prefix + "." + part, ws));
    } else {
      ParamSpec p{prefix + "." + part, ws[0]->shape, ws[0]->source};
      params.push_back(p);
    }
  };
  add("up", [](const FfnMatch &f) -> const WeightUse * {
    return f.up ? &*f.up : nullptr;
  });
  add("gate", [](const FfnMatch &f) -> const WeightUse * {
    return f.gate ? &*f.gate : nullptr;
  });
  add("down", [](const FfnMatch &f) -> const WeightUse * { return &f.down; });
}

} // namespace mlir::moe::frontend::torchpat
