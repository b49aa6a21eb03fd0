//===- TorchAttention.cpp - attention as torch.onnx.export writes it ------===//
//
// Recognises an attention sublayer written with MatMul: hand-written
// Q/K/V/softmax/O (HF LLaMA / GPT style, with or without rotary and grouped
// KV heads) and nn.MultiheadAttention (one packed in_proj MatMul sliced into
// Q, K, V). The anchor is a Softmax over a Q·Kᵀ MatMul; everything else is
// found by data flow from it (TorchMatch.h), so the dozens of shape nodes
// torch emits around it do not matter.
//
//===----------------------------------------------------------------------===//
#include "TorchMatch.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <map>

namespace mlir::moe::frontend {

using namespace torchpat;
using onnx::NodeProto;

namespace {

/// Ops an attention region may contain besides the recognised anchors:
/// shape plumbing, the mask, rotary, GQA repeats and the norm.
const llvm::StringSet<> &attentionOps() {
  static const llvm::StringSet<> ops = {
      "MatMul", "Transpose", "Reshape", "Softmax", "Div", "Mul", "Add", "Sub",
      "Where", "Trilu", "Slice", "Neg", "Concat", "Sin", "Cos", "Unsqueeze",
      "Squeeze", "Constant", "Shape", "Gather", "ConstantOfShape", "Equal",
      "Expand", "Split", "Tile", "Cast", "Einsum", "Range", "Identity", "Sqrt",
      "Pow", "ReduceMean", "LayerNormalization", "Reciprocal", "Not", "Less",
      "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Flatten",
      "Dropout", "Max", "Min", "Clip", "IsInf", "IsNaN"};
  return ops;
}

/// Q·Kᵀ and P·V: MatMul, or a two-operand Einsum ("bhqd,bhkd->bhqk").
bool isProduct(const NodeProto &n) {
  return n.op_type() == "MatMul" ||
         (n.op_type() == "Einsum" && n.input_size() == 2);
}

struct AttnCtx {
  const OnnxGraph &g;
  RegionView rv;
  std::vector<WeightUse> projs;
  AttnCtx(const OnnxGraph &g, const Region &r) : g(g), rv(g, r) {}

  bool isProj(const NodeProto &n) const {
    return llvm::any_of(projs, [&](const WeightUse &w) { return w.node == &n; });
  }
  const WeightUse *proj(const NodeProto *n) const {
    for (const WeightUse &w : projs)
      if (w.node == n)
        return &w;
    return nullptr;
  }
  /// The projections `value` is computed from (not crossing projections).
  std::vector<const WeightUse *> projsOf(llvm::StringRef value) const {
    std::vector<const WeightUse *> out;
    for (const NodeProto *n :
         rv.backwardNodes(value, [&](const NodeProto &m) { return isProj(m); }))
      if (const WeightUse *w = proj(n))
        out.push_back(w);
    return out;
  }
  bool reaches(llvm::StringRef value, const NodeProto *target) const {
    return llvm::is_contained(rv.backwardNodes(value), target);
  }

  /// Walks from `value` back to `target` along the operand that leads there,
  /// multiplying the scalar constants of Mul / Div nodes on the way, and
  /// recording the side operands of Add / Sub / Where (masks).
  double chainScale(std::string value, const NodeProto *target,
                    std::vector<std::pair<const NodeProto *, std::string>>
                        *sides = nullptr) const {
    double scale = 1.0;
    for (int hop = 0; hop < 128; ++hop) {
      const NodeProto *p = rv.prod(value);
      if (!p || p == target)
        break;
      std::string next;
      for (int i = 0; i < p->input_size(); ++i) {
        if (p->input(i).empty())
          continue;
        if (next.empty() &&
            (rv.prod(p->input(i)) == target || reaches(p->input(i), target)))
          next = p->input(i);
      }
      if (next.empty())
        break;
      for (int i = 0; i < p->input_size(); ++i) {
        const std::string &o = p->input(i);
        if (o == next || o.empty())
          continue;
        if (p->op_type() == "Mul" || p->op_type() == "Div") {
          if (auto c = scalarConst(g, o))
            scale = p->op_type() == "Mul" ? scale * *c
                    : i == 1             ? scale / *c
                                         : scale; // c / x: not a scale
        } else if (sides && (p->op_type() == "Add" || p->op_type() == "Sub" ||
                             p->op_type() == "Where")) {
          sides->push_back({p, o});
        }
      }
      value = next;
    }
    return scale;
  }
};

/// Whether a mask value is a causal (triangular) mask; nullopt: not a
/// constant mask we understand.
std::optional<bool> causalMask(const OnnxGraph &g, llvm::StringRef value) {
  // A Trilu anywhere behind the mask: triu(1) marks the masked positions,
  // tril(0) the kept ones; both are the causal mask.
  std::vector<std::string> work{value.str()};
  std::set<std::string> seen;
  while (!work.empty()) {
    std::string v = work.back();
    work.pop_back();
    if (!seen.insert(v).second || seen.size() > 64)
      continue;
    const NodeProto *p = g.producer(v);
    if (!p)
      continue;
    if (p->op_type() == "Trilu") {
      int64_t k = 0;
      if (p->input_size() > 1 && !p->input(1).empty()) {
        auto kv = evalInts(g, p->input(1));
        if (!kv || kv->size() != 1)
          return std::nullopt;
        k = (*kv)[0];
      }
      bool upper = attrInt(*p, "upper", 1) != 0;
      return (upper && k == 1) || (!upper && k == 0);
    }
    for (const std::string &i : p->input())
      if (!i.empty())
        work.push_back(i);
  }
  // A constant [.., N, N] float mask: -inf (or very negative) above the
  // diagonal, 0 elsewhere.
  auto shape = g.shape(value);
  auto vals = g.floatValues(value);
  if (!shape || !vals || shape->size() < 2)
    return std::nullopt;
  int64_t n = shape->back();
  if ((*shape)[shape->size() - 2] != n || n <= 0 ||
      static_cast<int64_t>(vals->size()) < n * n)
    return std::nullopt;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double x = (*vals)[i * n + j];
      if (j > i ? !(x < -1e4) : x != 0.0)
        return std::nullopt;
    }
  return true;
}

/// Recovers the rotary base from an inv_freq-like constant (d/2 values,
/// inv[i] = base^(-2i/d)) behind the Sin / Cos tables. A geometric inv_freq
/// of another length means rotary over only part of each head (GPT-NeoX
/// rotary_pct): `partial` is set to its length.
std::optional<double> rotaryBase(const OnnxGraph &g, const NodeProto &sinCos,
                                 int64_t headDim, int64_t &partial) {
  std::vector<std::string> work{sinCos.input(0)};
  std::set<std::string> seen;
  while (!work.empty()) {
    std::string v = work.back();
    work.pop_back();
    if (!seen.insert(v).second || seen.size() > 64)
      continue;
    auto f = g.floatValues(v);
    if (f && f->size() > 2 && (*f)[0] == 1.0 && (*f)[1] > 0 && (*f)[1] < 1 &&
        std::abs((*f)[2] - (*f)[1] * (*f)[1]) < 1e-4 &&
        static_cast<int64_t>(f->size()) != headDim / 2) {
      partial = static_cast<int64_t>(f->size());
      return std::nullopt;
    }
    if (f && static_cast<int64_t>(f->size()) == headDim / 2 && f->size() > 1 &&
        (*f)[0] == 1.0 && (*f)[1] > 0 && (*f)[1] < 1)
    {
      // float32 tables are good to ~1e-6: snap to the integer base the
      // model was written with (10000, 500000, ...).
      double b = std::pow((*f)[1], -static_cast<double>(headDim) / 2.0);
      double r = std::round(b);
      return std::abs(b - r) <= 1e-4 * b ? r : b;
    }
    if (const NodeProto *p = g.producer(v))
      for (const std::string &i : p->input())
        if (!i.empty())
          work.push_back(i);
  }
  return std::nullopt;
}

} // namespace

FailureOr<bool> matchTorchAttention(const OnnxGraph &g, const Region &r,
                                    MatchTarget &t) {
  AttnCtx c(g, r);
  for (const NodeProto *n : r.nodes)
    if (auto w = weightUse(g, *n); w && w->shape.size() == 2)
      c.projs.push_back(*w);

  // The anchor: a Softmax over a MatMul of two computed operands (Q·Kᵀ).
  const NodeProto *softmax = nullptr, *scores = nullptr;
  for (const NodeProto *sm : c.rv.ofType("Softmax")) {
    for (const NodeProto *n : c.rv.backwardNodes(
             sm->input(0), [&](const NodeProto &m) {
               return isProduct(m) || m.op_type() == "Softmax";
             })) {
      if (isProduct(*n) && !weightUse(g, *n) &&
          !isConstantValue(g, n->input(0)) &&
          !isConstantValue(g, n->input(1))) {
        softmax = sm;
        scores = n;
        break;
      }
    }
    if (scores)
      break;
  }
  if (!scores)
    return false;
  for (const NodeProto *n : r.nodes)
    if (!attentionOps().contains(n->op_type())) {
      g.error(*n) << "node of type " << n->op_type()
                  << " in the attention sublayer is not understood";
      return failure();
    }
  if (failed(rejectBiases(c.rv, "attention")))
    return failure();

  // P·V: the MatMul reading the softmax (through casts / dropout).
  const NodeProto *pv = nullptr;
  auto cone = c.rv.forwardCone({softmax->output(0)});
  for (const NodeProto *n : r.nodes)
    if (isProduct(*n) && n->input_size() == 2 && !weightUse(g, *n) &&
        cone.count(n->input(0)) &&
        !cone.count(n->input(1))) {
      pv = n;
      break;
    }
  if (!pv) {
    g.error(*softmax) << "attention softmax is not multiplied by V";
    return failure();
  }

  // Q, K, V and O by data flow.
  auto qs = c.projsOf(scores->input(0)), ks = c.projsOf(scores->input(1)),
       vs = c.projsOf(pv->input(1));
  auto only = [&](std::vector<const WeightUse *> &ws, const char *what,
                  const NodeProto *at) -> const WeightUse * {
    if (ws.size() == 1)
      return ws[0];
    g.error(*at) << "attention " << what << " comes from " << ws.size()
                 << " weight projections; expected one";
    return nullptr;
  };
  const WeightUse *wq = only(qs, "Q", scores), *wk = only(ks, "K", scores),
                  *wv = only(vs, "V", pv);
  if (!wq || !wk || !wv)
    return failure();
  auto pvCone = c.rv.forwardCone({pv->output(0)});
  const WeightUse *wo = nullptr;
  for (const WeightUse &w : c.projs) {
    if (&w == wq || &w == wk || &w == wv)
      continue;
    if (!pvCone.count(w.data) || wo) {
      g.error(*w.node) << "weight projection '" << w.source.initializers[0]
                       << "' is not one of the attention's Q, K, V, O";
      return failure();
    }
    wo = &w;
  }
  if (!wo) {
    g.error(*pv) << "attention has no output projection";
    return failure();
  }

  // Sources; nn.MultiheadAttention's packed in_proj is sliced per role.
  std::map<std::string, WeightSource> src;
  std::map<std::string, std::vector<int64_t>> shp;
  auto addRole = [&](const std::string &role, const WeightUse *w,
                     llvm::StringRef consumerValue) -> LogicalResult {
    WeightSource s = w->source;
    std::vector<int64_t> shape = w->shape;
    bool packed = (w == wq) + (w == wk) + (w == wv) > 1;
    if (packed) {
      // Find the Slice of the packed output that leads to this role.
      const NodeProto *slice = nullptr;
      for (const NodeProto *n : c.rv.backwardNodes(
               consumerValue,
               [&](const NodeProto &m) { return c.isProj(m); }))
        if (n->op_type() == "Slice" && c.rv.prod(n->input(0)) == w->node)
          slice = n;
      if (!slice) {
        g.error(*w->node) << "packed projection '" << s.initializers[0]
                          << "' is used for several of Q, K, V without "
                             "slicing";
        return failure();
      }
      int64_t rows = w->shape[1];
      std::vector<const NodeProto *> slices;
      for (const NodeProto *u : c.rv.users(w->node->output(0)))
        if (u->op_type() == "Slice")
          slices.push_back(u);
      auto st = evalInts(g, slice->input(1)), en = evalInts(g, slice->input(2));
      int64_t begin, size;
      if (st && en && st->size() == 1 && en->size() == 1) {
        begin = (*st)[0];
        size = std::min((*en)[0], rows) - begin;
      } else if (slices.size() == 3 && rows % 3 == 0) {
        // torch's chunk(3) slices in order: q, k, v.
        size = rows / 3;
        begin = size * (llvm::find(slices, slice) - slices.begin());
      } else {
        g.error(*slice) << "cannot evaluate the slice bounds of packed "
                           "projection '"
                        << s.initializers[0] << "'";
        return failure();
      }
      if (slice->input_size() > 3 && !slice->input(3).empty()) {
        auto ax = evalInts(g, slice->input(3));
        auto rank = g.shape(slice->input(0));
        if (!ax || ax->size() != 1 ||
            ((*ax)[0] != -1 && (!rank || (*ax)[0] != (int64_t)rank->size() - 1))) {
          g.error(*slice) << "packed projection is sliced along an axis "
                             "other than its features";
          return failure();
        }
      }
      if (begin < 0 || size <= 0 || begin + size > rows) {
        g.error(*slice) << "packed projection slice [" << begin << ", "
                        << begin + size << ") is outside its " << rows
                        << " features";
        return failure();
      }
      // Features are the initializer's rows when the MatMul transposes it
      // (torch's out x in), its columns otherwise.
      s.sliceAxis = s.transpose ? 0 : 1;
      s.sliceBegin = begin;
      s.sliceSize = size;
      shape[1] = size;
    }
    src[role] = s;
    shp[role] = shape;
    return success();
  };
  if (failed(addRole("wq", wq, scores->input(0))) ||
      failed(addRole("wk", wk, scores->input(1))) ||
      failed(addRole("wv", wv, pv->input(1))) ||
      failed(addRole("wo", wo, wo->data)))
    return failure();
  int64_t m = shp["wq"][0];
  int64_t qWidth = shp["wq"][1], kvWidth = shp["wk"][1];
  if (shp["wk"][0] != m || shp["wv"][0] != m || shp["wv"][1] != kvWidth ||
      shp["wo"] != std::vector<int64_t>{qWidth, m}) {
    g.error(*wo->node) << "attention projection shapes disagree: wq " << m
                       << "x" << qWidth << ", wk " << shp["wk"][0] << "x"
                       << kvWidth << ", wv " << shp["wv"][0] << "x"
                       << shp["wv"][1] << ", wo " << shp["wo"][0] << "x"
                       << shp["wo"][1];
    return failure();
  }

  // Head size: the last dimension of Q as it enters Q·Kᵀ (static shape or a
  // reshape target on the way), else from the 1/sqrt(d) scale.
  double scale = c.chainScale(softmax->input(0), scores) *
                 c.chainScale(scores->input(0), wq->node) *
                 c.chainScale(scores->input(1), wk->node);
  int64_t headDim = 0;
  if (auto s = g.shape(scores->input(0)); s && s->size() >= 3 && s->back() > 0)
    headDim = s->back();
  if (!headDim)
    for (const NodeProto *n : c.rv.backwardNodes(
             scores->input(0), [&](const NodeProto &x) { return c.isProj(x); }))
      if (n->op_type() == "Reshape")
        if (auto v = evalInts(g, n->input(1));
            v && v->size() >= 3 && v->back() > 0) {
          headDim = v->back();
          break;
        }
  if (!headDim && scale > 0 && scale < 1)
    headDim = std::llround(1.0 / (scale * scale));
  if (headDim <= 0 || qWidth % headDim || kvWidth % headDim) {
    g.error(*scores) << "cannot determine the attention head size (Q width "
                     << qWidth << ", KV width " << kvWidth << ")";
    return failure();
  }
  if (std::abs(scale * std::sqrt(static_cast<double>(headDim)) - 1.0) > 1e-3) {
    g.error(*softmax) << "attention scores are scaled by " << scale
                      << ", not 1/sqrt(head_dim = " << headDim
                      << "); only scaled dot-product attention is supported";
    return failure();
  }
  int64_t heads = qWidth / headDim, kvHeads = kvWidth / headDim;
  if (heads % kvHeads) {
    g.error(*scores) << heads << " query heads are not a multiple of "
                     << kvHeads << " KV heads";
    return failure();
  }

  // Masks: what is added to (or selected into) the scores before Softmax.
  std::vector<std::pair<const NodeProto *, std::string>> sides;
  c.chainScale(softmax->input(0), scores, &sides);
  bool causal = false;
  for (auto &[node, value] : sides) {
    if (!isConstantValue(g, value)) {
      // Where(mask, scores, fill): the condition is the mask, the fill is
      // constant; an Add of a computed tensor is a padding mask.
      g.error(*node) << "attention mask '" << value
                     << "' depends on the inputs; only a causal mask is "
                        "supported";
      return failure();
    }
    auto isCausal = causalMask(g, value);
    if (!isCausal) {
      if (node->op_type() == "Where" && scalarConst(g, value))
        continue; // the -inf fill of a Where whose condition we check
      g.error(*node) << "attention mask '" << value
                     << "' is not a causal (triangular) mask";
      return failure();
    }
    if (!*isCausal) {
      g.error(*node) << "attention mask '" << value
                     << "' is triangular but not causal";
      return failure();
    }
    causal = true;
  }

  // Rotary: sin/cos tables and rotate-half (Neg) on both Q and K.
  auto hasNeg = [&](llvm::StringRef v, const NodeProto *proj) {
    for (const NodeProto *n : c.rv.backwardNodes(
             v, [&](const NodeProto &x) { return &x == proj; }))
      if (n->op_type() == "Neg")
        return true;
    return false;
  };
  auto sins = c.rv.ofType("Sin"), coss = c.rv.ofType("Cos");
  bool qRot = hasNeg(scores->input(0), wq->node),
       kRot = hasNeg(scores->input(1), wk->node);
  bool rotary = qRot && kRot;
  if (qRot != kRot) {
    g.error(*scores) << "rotary embedding applied to only one of Q and K";
    return failure();
  }
  double base = 10000.0;
  if (rotary) {
    // Tables may also be constant-folded initializers; then no Sin/Cos.
    const NodeProto *sc = !sins.empty() ? sins[0]
                          : !coss.empty() ? coss[0]
                                          : nullptr;
    int64_t partial = 0;
    if (sc)
      if (auto b = rotaryBase(g, *sc, headDim, partial))
        base = *b;
    if (partial) {
      g.error(*sc) << "rotary embedding over " << 2 * partial << " of "
                   << headDim
                   << " head dimensions (partial rotary) is not supported";
      return failure();
    }
  }

  // The pre-norm last: it adds parameters, which only a match may do.
  std::string prefix = blockPrefix(t.blockIndex);
  std::vector<ParamSpec> normParams;
  NormMatch nm;
  FailureOr<bool> norm =
      matchNorm(g, r.input, prefix + ".attn_norm", normParams, nm);
  if (failed(norm))
    return failure();

  AttentionSpec &a = t.block.attention;
  a.loc = g.loc(*scores);
  a.heads = heads;
  a.kvHeads = kvHeads;
  a.headDim = headDim;
  a.causal = causal;
  a.rotary = rotary;
  a.rotaryBase = base;
  if (*norm) {
    a.prenorm = nm.kind;
    a.epsilon = nm.epsilon;
  } else {
    a.prenorm = std::nullopt;
  }
  for (const char *role : {"wq", "wk", "wv", "wo"})
    t.params.push_back({prefix + ".attn." + role, shp[role], src[role]});
  t.params.insert(t.params.end(), normParams.begin(), normParams.end());
  return true;
}

} // namespace mlir::moe::frontend
