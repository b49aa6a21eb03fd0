//===- TorchAttention.cpp - attention as torch.onnx.export writes it ------===//
//
// Recognises an attention sublayer written with MatMul: hand-written
// Q/K/V/softmax/O (HF LLaMA / Mixtral / Qwen2 style, GPT style, with or
// without rotary and grouped KV heads) and nn.MultiheadAttention (one
// packed in_proj MatMul sliced into Q, K, V). The anchor is a Softmax over a
// Q·Kᵀ product; everything else is found by data flow from it (TorchMatch.h).
//
// Every node the matcher claims is one it represents, by role:
//   pre-norm            matchNorm (any factor order, fp32 Casts)
//   projections         MatMul/Gemm by a weight (+ the weight's Transpose)
//   paths               Q, K, V, P and O: head reshapes/transposes, no-op
//                       Casts, GQA repeats (K/V), packed slices (MHA's
//                       Slice, DBRX's Split), the clamp of the projection
//                       (DBRX's clip_qkv: a symmetric constant Clip), a
//                       1/sqrt(d) scale, rotary (Q/K; fitted by evaluation,
//                       Rotary.h)
//   scores              Q·Kᵀ, its scale, the causal mask (evaluated:
//                       StaticEval), Softmax, P·V
// The importer refuses the model when any other node of the region computes
// something (OnnxImport.cpp, accountFor).
//
//===----------------------------------------------------------------------===//
#include "Rotary.h"
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

/// Q·Kᵀ and P·V: MatMul, or a two-operand Einsum ("bhqd,bhkd->bhqk").
bool isProduct(const NodeProto &n) {
  return n.op_type() == "MatMul" ||
         (n.op_type() == "Einsum" && n.input_size() == 2);
}

/// Ops that only move or relabel a head's values.
bool isLayout(const NodeProto &n) {
  static const llvm::StringSet<> ops = {"Reshape",  "Transpose", "Squeeze",
                                        "Unsqueeze", "Flatten",  "Identity"};
  return ops.contains(n.op_type()) || isNoOpCast(n) ||
         (n.op_type() == "Dropout" && n.input_size() < 3);
}

/// The attention sublayer as the matcher sees it.
struct AttnCtx {
  const OnnxGraph &g;
  const Region &r;
  RegionView rv;
  StaticEval &eval;
  int blockIndex;
  std::vector<WeightUse> projs;
  const NodeProto *softmax = nullptr, *scores = nullptr, *pv = nullptr;
  const WeightUse *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
  /// Claimed nodes, and what the paths contribute.
  std::set<const NodeProto *> claimed;
  double scale = 1.0;
  bool causal = false;
  std::optional<RotaryFit> qRotary, kRotary;
  const NodeProto *qRotaryAt = nullptr, *kRotaryAt = nullptr;
  bool repeatsKv = false;
  /// The clamp bound each of the Q, K, V paths applies (clip_qkv), and the
  /// Clip node that applies it.
  std::map<int, std::pair<double, const NodeProto *>> clips;
  /// A projection's bias: the initializer and, when a separate Add adds it
  /// (not a Gemm's third input), that Add.
  struct Bias {
    std::string init;
    const NodeProto *add = nullptr;
  };
  std::map<const NodeProto *, Bias> biases;

  AttnCtx(const OnnxGraph &g, const Region &r, StaticEval &eval, int block)
      : g(g), r(r), rv(g, r), eval(eval), blockIndex(block) {}

  bool isProj(const NodeProto &n) const {
    return llvm::any_of(projs, [&](const WeightUse &w) { return w.node == &n; });
  }
  const WeightUse *proj(const NodeProto *n) const {
    for (const WeightUse &w : projs)
      if (w.node == n)
        return &w;
    return nullptr;
  }
  /// Where a projection's result (bias included) is: its bias Add's
  /// output, else its own.
  std::string projOut(const WeightUse *w) const {
    auto it = biases.find(w->node);
    return it != biases.end() && it->second.add ? it->second.add->output(0)
                                                : w->node->output(0);
  }
  /// The projection whose result (bias included) is `value`, or null.
  const WeightUse *projAt(llvm::StringRef value) const {
    for (const WeightUse &w : projs)
      if (projOut(&w) == value)
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
  /// Dynamic region nodes on a path from `from` to `to` (graph order).
  std::vector<const NodeProto *> pathNodes(llvm::StringRef from,
                                           llvm::StringRef to) const {
    auto cone = rv.forwardCone({from.str()});
    std::vector<const NodeProto *> out;
    const NodeProto *start = g.producer(from);
    for (const NodeProto *n : rv.backwardNodes(
             to, [&](const NodeProto &m) { return &m == start || isProj(m); }))
      if (n != start && !isProj(*n) && !eval.knownNode(*n) &&
          llvm::any_of(n->input(),
                       [&](const std::string &i) { return cone.count(i); }))
        out.push_back(n);
    llvm::sort(out, [&](const NodeProto *a, const NodeProto *b) {
      return g.indexOf(*a) < g.indexOf(*b);
    });
    return out;
  }
  InFlightDiagnostic fail(const NodeProto &n, llvm::StringRef path) const {
    InFlightDiagnostic d = g.error(n);
    d << "on the attention's " << path << " path: ";
    return d;
  }
};

/// A Mul / Div of the path value by a static scalar: the factor it applies.
std::optional<double> scaleOf(AttnCtx &c, const NodeProto &n,
                              const std::unordered_set<std::string> &dyn) {
  if ((n.op_type() != "Mul" && n.op_type() != "Div") || n.input_size() != 2)
    return std::nullopt;
  int k = dyn.count(n.input(0)) ? 1 : 0;
  if (dyn.count(n.input(k)))
    return std::nullopt;
  const StaticTensor *t = c.eval.value(n.input(k));
  if (!t || t->numel() != 1)
    return std::nullopt;
  if (n.op_type() == "Mul")
    return t->data[0];
  if (k == 1 && t->data[0] != 0)
    return 1.0 / t->data[0];
  return std::nullopt; // c / x is not a scale
}

/// The values a path's nodes hold (what depends on the path's start).
std::unordered_set<std::string>
dynamicValues(const std::vector<const NodeProto *> &nodes,
              llvm::StringRef from) {
  std::unordered_set<std::string> dyn{from.str()};
  for (const NodeProto *n : nodes)
    for (const std::string &o : n->output())
      dyn.insert(o);
  return dyn;
}

/// Splits a path into segments at its cut values (values every route from
/// `from` passes through). Returns the cut values in order (first = from)
/// and, per segment, its nodes.
void cutPath(const std::vector<const NodeProto *> &nodes, llvm::StringRef from,
             const RegionView &rv, std::vector<std::string> &cuts,
             std::vector<std::vector<const NodeProto *>> &segments) {
  std::set<const NodeProto *> inPath(nodes.begin(), nodes.end());
  std::map<std::string, int> pending; // value -> path readers not yet seen
  auto readers = [&](const std::string &v) {
    int k = 0;
    for (const NodeProto *u : rv.users(v))
      k += inPath.count(u);
    return k;
  };
  pending[from.str()] = readers(from.str());
  cuts = {from.str()};
  segments.clear();
  std::vector<const NodeProto *> cur;
  for (const NodeProto *n : nodes) {
    cur.push_back(n);
    for (const std::string &i : n->input())
      if (auto it = pending.find(i); it != pending.end() && --it->second <= 0)
        pending.erase(it);
    for (const std::string &o : n->output())
      if (int k = readers(o))
        pending[o] = k;
    // One value left to follow, and this node made it: a cut (for a Split,
    // whichever of its outputs the path reads).
    if (pending.size() == 1 &&
        llvm::is_contained(n->output(), pending.begin()->first)) {
      cuts.push_back(pending.begin()->first);
      segments.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) {
    // The path's last node feeds the anchor: its output ends the path.
    cuts.push_back(cur.back()->output(0));
    segments.push_back(cur);
  }
}

enum class PathKind { In, Q, K, V, P, O };

const char *pathName(PathKind k) {
  switch (k) {
  case PathKind::In:
    return "input";
  case PathKind::Q:
    return "Q";
  case PathKind::K:
    return "K";
  case PathKind::V:
    return "V";
  case PathKind::P:
    return "softmax-to-P·V";
  case PathKind::O:
    return "output";
  }
  return "?";
}

/// The bound c of a clamp of a projection to [-c, c] (DBRX's clip_qkv):
/// constant, symmetric, positive and finite; anything else is refused.
FailureOr<double> clipBound(AttnCtx &c, const NodeProto &clip) {
  auto bound = [&](int k) -> std::optional<double> {
    if (clip.input_size() <= k || clip.input(k).empty())
      return std::nullopt;
    const StaticTensor *t = c.eval.value(clip.input(k));
    if (!t || t->numel() != 1)
      return std::nullopt;
    return t->data[0];
  };
  std::optional<double> lo = bound(1), hi = bound(2);
  if (!lo || !hi || *lo != -*hi || !(*hi > 0) || !std::isfinite(*hi)) {
    c.g.error(clip) << "clamps a Q/K/V projection to a range that is not a "
                       "constant [-c, c] with c > 0; moe.attention's "
                       "clip_qkv clamps to [-c, c] only";
    return failure();
  }
  return *hi;
}

/// Claims the nodes between `from` and `to` by role: layout, a packed
/// projection's slice, scale (Q/K), GQA repeat (K/V), rotary (Q/K). Errors
/// at the first node that is none of these.
LogicalResult claimPath(AttnCtx &c, PathKind kind, llvm::StringRef from,
                        llvm::StringRef to, int64_t seq) {
  std::vector<const NodeProto *> nodes = c.pathNodes(from, to);
  std::unordered_set<std::string> dyn = dynamicValues(nodes, from);
  std::vector<std::string> cuts;
  std::vector<std::vector<const NodeProto *>> segs;
  cutPath(nodes, from, c.rv, cuts, segs);
  bool qk = kind == PathKind::Q || kind == PathKind::K;
  // Classify single-node segments; runs of anything else between two cut
  // values are rotary candidates (Q / K only).
  size_t i = 0;
  while (i < segs.size()) {
    const std::vector<const NodeProto *> &s = segs[i];
    const NodeProto *n = s.front();
    if (s.size() == 1 && isLayout(*n)) {
      c.claimed.insert(n);
      ++i;
      continue;
    }
    bool atProjection = c.projAt(n->input(0)) ||
                        (i == 1 && c.clips.count(int(kind)) &&
                         c.clips[int(kind)].second == segs[0].front());
    if (s.size() == 1 && (n->op_type() == "Slice" || n->op_type() == "Split") &&
        i <= 1 && atProjection) {
      c.claimed.insert(n); // a packed projection's Q/K/V rows (roleSource)
      ++i;
      continue;
    }
    if (s.size() == 1 && n->op_type() == "Clip" && i == 0 &&
        c.projAt(n->input(0)) && kind != PathKind::O) {
      FailureOr<double> bound = clipBound(c, *n);
      if (failed(bound))
        return failure();
      c.clips[int(kind)] = {*bound, n};
      c.claimed.insert(n);
      ++i;
      continue;
    }
    if (s.size() == 1 && qk) {
      if (auto f = scaleOf(c, *n, dyn)) {
        c.scale *= *f;
        c.claimed.insert(n);
        ++i;
        continue;
      }
    }
    bool kv = kind == PathKind::K || kind == PathKind::V;
    if (!qk && !kv) {
      c.fail(*n, pathName(kind))
          << n->op_type()
          << " is not a head reshape/transpose or no-op Cast; moe.attention "
             "would not compute it";
      return failure();
    }
    // A run of segments that are not plain layout / scale: rotary (Q/K,
    // same shape before and after) or a KV-head repeat (K/V, one axis
    // multiplied). Probed over the run, widened over layout segments on
    // either side until one fits.
    auto plain = [&](size_t k) {
      return segs[k].size() == 1 &&
             (isLayout(*segs[k][0]) || scaleOf(c, *segs[k][0], dyn));
    };
    size_t end = i;
    while (end + 1 < segs.size() && !plain(end + 1))
      ++end;
    std::string why;
    std::optional<RotaryFit> fit;
    bool repeat = false;
    size_t from0 = i;
    for (size_t e = i; e < segs.size() && !fit && !repeat; ++e) {
      if (e > end && !plain(e))
        break;
      for (size_t b0 = i + 1; b0-- > 0 && !fit && !repeat;) {
        if (b0 < i && !plain(b0))
          break;
        auto sa = c.g.shape(cuts[b0]);
        auto sb = shapeFrom(c.eval, c.g, cuts[b0], cuts[e + 1]);
        if (qk && sa && sb && *sa == *sb) {
          fit = fitRotary(c.eval, c.g, cuts[b0], cuts[e + 1], seq, why);
          if (fit) {
            from0 = b0;
            end = e;
          }
        } else if (kv && sa && sb && sa->size() == sb->size()) {
          repeat = fitKvRepeat(c.eval, c.g, cuts[b0], cuts[e + 1], why);
          if (repeat) {
            from0 = b0;
            end = e;
          }
        }
      }
    }
    if (!fit && !repeat) {
      c.fail(*n, pathName(kind))
          << "the nodes from '" << c.g.nodeName(*n) << "' to '"
          << c.g.nodeName(*segs[end].back()) << "' are not "
          << (qk ? "a rotary embedding" : "")
          << (qk && kv ? " or " : "") << (kv ? "a KV-head repeat" : "")
          << " moe.attention can represent: " << why;
      return failure();
    }
    for (size_t k = from0; k <= end; ++k)
      c.claimed.insert(segs[k].begin(), segs[k].end());
    if (repeat) {
      c.repeatsKv = true;
      i = end + 1;
      continue;
    }
    (kind == PathKind::Q ? c.qRotary : c.kRotary) = fit;
    (kind == PathKind::Q ? c.qRotaryAt : c.kRotaryAt) = n;
    i = end + 1;
  }
  return success();
}

/// Whether an additive or selecting mask is causal; `why` when it is not.
/// `keep(i, j, lead)` tells whether query i may see key j.
bool causalPattern(const StaticTensor &t,
                   const std::function<std::optional<bool>(int64_t)> &keepAt,
                   int64_t seq, std::string &why) {
  if (t.shape.size() < 2 || t.shape.back() != seq ||
      t.shape[t.shape.size() - 2] != seq) {
    why = "its last two dimensions are not " + std::to_string(seq) + " x " +
          std::to_string(seq);
    return false;
  }
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t col = i % seq, row = (i / seq) % seq;
    std::optional<bool> keep = keepAt(i);
    if (!keep) {
      why = "its values are neither 0 nor a large negative number";
      return false;
    }
    if (*keep != (col <= row)) {
      why = "position (" + std::to_string(row) + ", " + std::to_string(col) +
            ") is " + (*keep ? "kept" : "masked") +
            ", which a causal mask does not do";
      return false;
    }
  }
  return true;
}

/// Claims the nodes from Q·Kᵀ to the Softmax: scale, causal mask (its
/// values evaluated), no-op Casts / clamps.
LogicalResult claimScores(AttnCtx &c, int64_t seq) {
  std::vector<const NodeProto *> nodes =
      c.pathNodes(c.scores->output(0), c.softmax->input(0));
  std::unordered_set<std::string> dyn =
      dynamicValues(nodes, c.scores->output(0));
  for (const NodeProto *n : nodes) {
    llvm::StringRef op = n->op_type();
    if (isLayout(*n)) {
      c.claimed.insert(n);
      continue;
    }
    if (auto f = scaleOf(c, *n, dyn)) {
      c.scale *= *f;
      c.claimed.insert(n);
      continue;
    }
    std::string why;
    if ((op == "Add" || op == "Where" || op == "Max") && n->input_size() >= 2) {
      std::vector<int> stat;
      for (int k = 0; k < n->input_size(); ++k)
        if (!dyn.count(n->input(k)))
          stat.push_back(k);
      for (int k : stat)
        if (!c.eval.known(n->input(k))) {
          c.g.error(*n) << "attention mask '" << n->input(k)
                        << "' depends on the inputs; only "
                           "a causal mask is supported";
          return failure();
        }
      if (op == "Max" && stat.size() == 1) {
        // HF's clamp at finfo.min: no effect on finite scores.
        const StaticTensor *t = c.eval.value(n->input(stat[0]));
        if (t && llvm::all_of(t->data, [](double v) { return v <= -1e30; })) {
          c.claimed.insert(n);
          continue;
        }
      } else if (op == "Add" && stat.size() == 1) {
        const StaticTensor *t = c.eval.value(n->input(stat[0]));
        if (causalPattern(*t, [&](int64_t i) -> std::optional<bool> {
              double v = t->data[i];
              if (v == 0)
                return true;
              if (v <= -1e4)
                return false;
              return std::nullopt;
            }, seq, why)) {
          c.causal = true;
          c.claimed.insert(n);
          continue;
        }
      } else if (op == "Where" && n->input_size() == 3 && stat.size() == 2 &&
                 stat[0] == 0) {
        const StaticTensor *cond = c.eval.value(n->input(0));
        const StaticTensor *fill = c.eval.value(n->input(stat[1]));
        bool keepWhenTrue = stat[1] == 2; // Where(cond, scores, fill)
        bool veryNegative =
            fill && llvm::all_of(fill->data, [](double v) { return v <= -1e4; });
        if (!veryNegative) {
          why = "the masked positions are not filled with a large negative "
                "number";
        } else if (causalPattern(*cond, [&](int64_t i) -> std::optional<bool> {
                     return (cond->data[i] != 0) == keepWhenTrue;
                   }, seq, why)) {
          c.causal = true;
          c.claimed.insert(n);
          continue;
        }
      }
      if (!why.empty()) {
        c.g.error(*n) << "attention mask is not causal: " << why
                      << "; only a causal mask is supported";
        return failure();
      }
    }
    c.g.error(*n) << "between the attention scores (Q·Kᵀ) and the softmax: "
                  << op
                  << " is neither a constant scale nor a causal mask; "
                     "moe.attention would not compute it";
    return failure();
  }
  return success();
}

/// The Softmax over a product of two computed operands (Q·Kᵀ), and P·V.
bool findAnchors(AttnCtx &c) {
  for (const NodeProto *sm : c.rv.ofType("Softmax")) {
    for (const NodeProto *n : c.rv.backwardNodes(
             sm->input(0), [&](const NodeProto &m) {
               return isProduct(m) || m.op_type() == "Softmax";
             })) {
      if (isProduct(*n) && !weightUse(c.g, *n) &&
          !isConstantValue(c.g, n->input(0)) &&
          !isConstantValue(c.g, n->input(1))) {
        c.softmax = sm;
        c.scores = n;
        return true;
      }
    }
  }
  return false;
}

LogicalResult findPv(AttnCtx &c) {
  auto cone = c.rv.forwardCone({c.softmax->output(0)});
  for (const NodeProto *n : c.r.nodes)
    if (isProduct(*n) && n->input_size() == 2 && !weightUse(c.g, *n) &&
        cone.count(n->input(0)) && !cone.count(n->input(1))) {
      c.pv = n;
      return success();
    }
  c.g.error(*c.softmax) << "attention softmax is not multiplied by V";
  return failure();
}

/// The bias of each projection: a Gemm's third input (nn.Linear on 2-D
/// input, nn.MultiheadAttention's out_proj), or an Add of a 1-D initializer
/// as wide as the projection to its output, that output's only use
/// (nn.Linear(bias=True) on 3-D input: HF Qwen2's q/k/v_proj,
/// nn.MultiheadAttention's packed in_proj_bias). Another Add stays
/// unclaimed: the path walk refuses it by name.
LogicalResult findBiases(AttnCtx &c) {
  std::set<const NodeProto *> seen;
  for (const WeightUse *w : {c.wq, c.wk, c.wv, c.wo}) {
    const NodeProto &n = *w->node;
    if (!seen.insert(&n).second)
      continue;
    int64_t width = w->shape.back();
    auto isBias = [&](const std::string &init) {
      auto s = init.empty() ? std::nullopt : c.g.shape(init);
      return s && s->size() == 1 && (*s)[0] == width;
    };
    if (n.op_type() == "Gemm" && n.input_size() > 2 && !n.input(2).empty()) {
      std::string init = initializerOf(c.g, n.input(2));
      if (!isBias(init) || attrFloat(n, "beta", 1.0) != 1.0) {
        c.g.error(n) << "Gemm with bias in attention: biases are supported "
                        "as a 1-D initializer of the projection's width ("
                     << width << ") with beta = 1 only";
        return failure();
      }
      c.biases[&n] = {init, nullptr};
      continue;
    }
    auto users = c.rv.users(n.output(0));
    if (users.size() != 1 || users[0]->op_type() != "Add" ||
        users[0]->input_size() != 2)
      continue;
    const NodeProto *add = users[0];
    std::string init =
        initializerOf(c.g, add->input(add->input(0) == n.output(0) ? 1 : 0));
    if (!isBias(init))
      continue;
    c.biases[&n] = {init, add};
    c.claimed.insert(add);
  }
  return success();
}

/// Q, K, V and O by data flow.
LogicalResult assignProjections(AttnCtx &c) {
  auto qs = c.projsOf(c.scores->input(0)), ks = c.projsOf(c.scores->input(1)),
       vs = c.projsOf(c.pv->input(1));
  auto only = [&](std::vector<const WeightUse *> &ws, const char *what,
                  const NodeProto *at) -> const WeightUse * {
    if (ws.size() == 1)
      return ws[0];
    c.g.error(*at) << "attention " << what << " comes from " << ws.size()
                   << " weight projections; expected one";
    return nullptr;
  };
  c.wq = only(qs, "Q", c.scores);
  c.wk = only(ks, "K", c.scores);
  c.wv = only(vs, "V", c.pv);
  if (!c.wq || !c.wk || !c.wv)
    return failure();
  auto pvCone = c.rv.forwardCone({c.pv->output(0)});
  for (const WeightUse &w : c.projs) {
    if (&w == c.wq || &w == c.wk || &w == c.wv)
      continue;
    if (!pvCone.count(w.data) || c.wo) {
      c.g.error(*w.node) << "weight projection '" << w.source.initializers[0]
                         << "' is not one of the attention's Q, K, V, O";
      return failure();
    }
    c.wo = &w;
  }
  if (!c.wo) {
    c.g.error(*c.pv) << "attention has no output projection";
    return failure();
  }
  for (const WeightUse *w : {c.wq, c.wk, c.wv, c.wo}) {
    c.claimed.insert(w->node);
    if (const NodeProto *t = c.g.producer(w->node->input(1)))
      if (c.rv.contains(t))
        c.claimed.insert(t); // the weight's Transpose / Identity
  }
  return success();
}

/// The value a packed projection's slices read: its output (bias
/// included), or the clamp's (clip_qkv) when one clamps it first.
std::string packedOut(AttnCtx &c, const WeightUse *w) {
  for (const NodeProto *u : c.rv.users(c.projOut(w)))
    if (u->op_type() == "Clip")
      return u->output(0); // claimPath checks the bound
  return c.projOut(w);
}

/// A packed Q/K/V projection that is neither Slice-d nor Split into its
/// roles: refused, naming it.
LogicalResult refuseUnslicedPacked(AttnCtx &c, const WeightUse *w) {
  c.g.error(*w->node) << "packed projection '" << w->source.initializers[0]
                      << "' is used for several of Q, K, V without slicing "
                         "it (Slice, or Split along its features)";
  return failure();
}

/// [begin, begin + size) of the features a Split output `index` holds, from
/// its split sizes (input 1 since opset 13, else the attribute; none:
/// equal parts).
bool splitRange(AttnCtx &c, const NodeProto &split, int index, int64_t rows,
                int64_t &begin, int64_t &size) {
  std::vector<int64_t> sizes;
  if (split.input_size() > 1 && !split.input(1).empty()) {
    auto v = evalInts(c.g, split.input(1));
    if (!v)
      return false;
    sizes = *v;
  } else {
    sizes = attrInts(split, "split");
  }
  if (sizes.empty()) {
    int parts = split.output_size();
    if (parts <= 0 || rows % parts)
      return false;
    sizes.assign(parts, rows / parts);
  }
  if (index >= int(sizes.size()))
    return false;
  begin = 0;
  for (int k = 0; k < index; ++k)
    begin += sizes[k];
  size = sizes[index];
  return true;
}

/// A role's weight; a packed projection (nn.MultiheadAttention's in_proj,
/// DBRX's Wqkv) is sliced: by Slice, or by Split along its features.
LogicalResult roleSource(AttnCtx &c, const WeightUse *w,
                         llvm::StringRef consumerValue, WeightSource &s,
                         std::vector<int64_t> &shape) {
  s = w->source;
  shape = w->shape;
  bool packed = (w == c.wq) + (w == c.wk) + (w == c.wv) > 1;
  if (!packed)
    return success();
  std::string in = packedOut(c, w);
  const NodeProto *slice = nullptr;
  for (const NodeProto *n : c.rv.backwardNodes(
           consumerValue, [&](const NodeProto &m) { return c.isProj(m); }))
    if ((n->op_type() == "Slice" || n->op_type() == "Split") &&
        n->input(0) == in)
      slice = n;
  if (!slice)
    return refuseUnslicedPacked(c, w);
  int64_t rows = w->shape[1];
  int64_t begin = 0, size = 0;
  auto rank = c.g.shape(slice->input(0));
  auto lastAxis = [&](int64_t axis) {
    return axis == -1 || (rank && axis == int64_t(rank->size()) - 1);
  };
  if (slice->op_type() == "Split") {
    int index = -1;
    for (int k = 0; k < slice->output_size(); ++k)
      if (c.rv.forwardCone({slice->output(k)}).count(consumerValue.str()))
        index = k;
    if (!lastAxis(attrInt(*slice, "axis", 0))) {
      c.g.error(*slice) << "packed projection is split along an axis other "
                           "than its features";
      return failure();
    }
    if (index < 0 || !splitRange(c, *slice, index, rows, begin, size)) {
      c.g.error(*slice) << "cannot evaluate the split sizes of packed "
                           "projection '"
                        << s.initializers[0] << "'";
      return failure();
    }
  } else {
    std::vector<const NodeProto *> slices;
    for (const NodeProto *u : c.rv.users(in))
      if (u->op_type() == "Slice")
        slices.push_back(u);
    auto st = evalInts(c.g, slice->input(1)),
         en = evalInts(c.g, slice->input(2));
    if (st && en && st->size() == 1 && en->size() == 1) {
      begin = (*st)[0];
      size = std::min((*en)[0], rows) - begin;
    } else if (slices.size() == 3 && rows % 3 == 0) {
      size = rows / 3; // torch's chunk(3) slices in order: q, k, v
      begin = size * (llvm::find(slices, slice) - slices.begin());
    } else {
      c.g.error(*slice) << "cannot evaluate the slice bounds of packed "
                           "projection '"
                        << s.initializers[0] << "'";
      return failure();
    }
    if (slice->input_size() > 3 && !slice->input(3).empty()) {
      auto ax = evalInts(c.g, slice->input(3));
      if (!ax || ax->size() != 1 || !lastAxis((*ax)[0])) {
        c.g.error(*slice) << "packed projection is sliced along an axis "
                             "other than its features";
        return failure();
      }
    }
    if (slice->input_size() > 4 && !slice->input(4).empty()) {
      auto step = evalInts(c.g, slice->input(4));
      if (!step || step->size() != 1 || (*step)[0] != 1) {
        c.g.error(*slice) << "packed projection is sliced with a step";
        return failure();
      }
    }
  }
  if (begin < 0 || size <= 0 || begin + size > rows) {
    c.g.error(*slice) << "packed projection slice [" << begin << ", "
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
  return success();
}

/// Head size: the last dimension of Q entering Q·Kᵀ (static shape or a
/// Reshape target on the way), else from the 1/sqrt(d) scale.
int64_t headDimOf(AttnCtx &c) {
  if (auto s = c.g.shape(c.scores->input(0)); s && s->size() >= 3 &&
                                               s->back() > 0)
    return s->back();
  for (const NodeProto *n : c.rv.backwardNodes(
           c.scores->input(0), [&](const NodeProto &x) { return c.isProj(x); }))
    if (n->op_type() == "Reshape")
      if (auto v = evalInts(c.g, n->input(1)); v && v->size() >= 3 &&
                                               v->back() > 0)
        return v->back();
  if (c.scale > 0 && c.scale < 1)
    return std::llround(1.0 / (c.scale * c.scale));
  return 0;
}

/// The stream's sequence length (static shape of the region input).
int64_t seqOf(const AttnCtx &c) {
  auto s = c.g.shape(c.r.input);
  return s && s->size() == 3 ? (*s)[1] : -1;
}

} // namespace

namespace {

/// Each role's weight source and whole-model shape; they must chain
/// (wq M x HD, wk / wv M x KD, wo HD x M).
struct RoleWeights {
  std::map<std::string, WeightSource> src;
  std::map<std::string, std::vector<int64_t>> shape;
  int64_t qWidth() { return shape["wq"][1]; }
  int64_t kvWidth() { return shape["wk"][1]; }
};

LogicalResult roleWeights(AttnCtx &c, RoleWeights &w) {
  auto role = [&](const char *name, const WeightUse *use,
                  llvm::StringRef consumer) {
    return roleSource(c, use, consumer, w.src[name], w.shape[name]);
  };
  if (failed(role("wq", c.wq, c.scores->input(0))) ||
      failed(role("wk", c.wk, c.scores->input(1))) ||
      failed(role("wv", c.wv, c.pv->input(1))) ||
      failed(role("wo", c.wo, c.wo->data)))
    return failure();
  auto &shp = w.shape;
  int64_t m = shp["wq"][0];
  if (shp["wk"][0] != m || shp["wv"][0] != m ||
      shp["wv"][1] != w.kvWidth() ||
      shp["wo"] != std::vector<int64_t>{w.qWidth(), m}) {
    c.g.error(*c.wo->node) << "attention projection shapes disagree: wq " << m
                           << "x" << w.qWidth() << ", wk " << shp["wk"][0]
                           << "x" << w.kvWidth() << ", wv " << shp["wv"][0]
                           << "x" << shp["wv"][1] << ", wo " << shp["wo"][0]
                           << "x" << shp["wo"][1];
    return failure();
  }
  return success();
}

/// The bias parameters (block<i>.attn.{bq,bk,bv,bo}) of the projections
/// that have one, sliced like their weights (a packed in_proj_bias);
/// moe.attention takes Q, K and V biases together or none.
LogicalResult biasParams(AttnCtx &c, RoleWeights &w, const std::string &prefix,
                         AttentionSpec &a, std::vector<ParamSpec> &out) {
  struct Role {
    const char *weight, *bias;
    const WeightUse *use;
  };
  std::vector<Role> roles = {
      {"wq", "bq", c.wq}, {"wk", "bk", c.wk}, {"wv", "bv", c.wv}};
  int qkv = llvm::count_if(
      roles, [&](const Role &r) { return c.biases.count(r.use->node); });
  if (qkv != 0 && qkv != 3) {
    c.g.error(*c.scores) << "only " << qkv
                         << " of the Q, K, V projections have a bias; "
                            "moe.attention takes all three or none";
    return failure();
  }
  roles.push_back({"wo", "bo", c.wo});
  for (const Role &r : roles) {
    auto it = c.biases.find(r.use->node);
    if (it == c.biases.end())
      continue;
    const WeightSource &ws = w.src[r.weight];
    WeightSource bs;
    bs.initializers = {it->second.init};
    attachFile(c.g, bs);
    if (ws.sliceAxis >= 0) {
      bs.sliceAxis = 0;
      bs.sliceBegin = ws.sliceBegin;
      bs.sliceSize = ws.sliceSize;
    }
    int64_t width = w.shape[r.weight][1];
    out.push_back({prefix + ".attn." + r.bias, {width}, bs});
  }
  a.qkvBias = qkv == 3;
  a.outBias = c.biases.count(c.wo->node) > 0;
  return success();
}

/// Every path between the anchors, node by node (claimPath, claimScores),
/// from `tokens` (the pre-norm's output, else the sublayer input) to the
/// residual Add.
LogicalResult claimPaths(AttnCtx &c, llvm::StringRef tokens) {
  int64_t seq = seqOf(c);
  for (const WeightUse *w : {c.wq, c.wk, c.wv})
    if (failed(claimPath(c, PathKind::In, tokens, w->data, seq)))
      return failure();
  return success(
      succeeded(claimPath(c, PathKind::Q, c.projOut(c.wq),
                          c.scores->input(0), seq)) &&
      succeeded(claimPath(c, PathKind::K, c.projOut(c.wk),
                          c.scores->input(1), seq)) &&
      succeeded(claimPath(c, PathKind::V, c.projOut(c.wv),
                          c.pv->input(1), seq)) &&
      succeeded(claimPath(c, PathKind::P, c.softmax->output(0),
                          c.pv->input(0), seq)) &&
      succeeded(
          claimPath(c, PathKind::O, c.pv->output(0), c.wo->data, seq)) &&
      succeeded(claimPath(c, PathKind::O, c.projOut(c.wo), c.r.output,
                          seq)) &&
      succeeded(claimScores(c, seq)));
}

/// Heads, KV heads and head size from the widths, the head size and the
/// 1/sqrt(d) scale; Q and K must carry the same rotary.
LogicalResult headGeometry(AttnCtx &c, RoleWeights &w, AttentionSpec &a) {
  const OnnxGraph &g = c.g;
  int64_t qWidth = w.qWidth(), kvWidth = w.kvWidth();
  int64_t headDim = headDimOf(c);
  if (headDim <= 0 || qWidth % headDim || kvWidth % headDim) {
    g.error(*c.scores) << "cannot determine the attention head size (Q width "
                       << qWidth << ", KV width " << kvWidth << ")";
    return failure();
  }
  if (std::abs(c.scale * std::sqrt(static_cast<double>(headDim)) - 1.0) >
      1e-3) {
    g.error(*c.softmax) << "attention scores are scaled by " << c.scale
                        << ", not 1/sqrt(head_dim = " << headDim
                        << "); only scaled dot-product attention is supported";
    return failure();
  }
  int64_t heads = qWidth / headDim, kvHeads = kvWidth / headDim;
  if (heads % kvHeads) {
    g.error(*c.scores) << heads << " query heads are not a multiple of "
                       << kvHeads << " KV heads";
    return failure();
  }
  if (c.repeatsKv && heads == kvHeads) {
    g.error(*c.scores) << "K/V are repeated (Expand/Tile) although there "
                          "are as many KV heads as query heads";
    return failure();
  }
  if (c.qRotary.has_value() != c.kRotary.has_value()) {
    g.error(c.qRotaryAt ? *c.qRotaryAt : *c.kRotaryAt)
        << "rotary embedding applied to only one of Q and K";
    return failure();
  }
  if (c.qRotary && (c.qRotary->layout != c.kRotary->layout ||
                    c.qRotary->theta != c.kRotary->theta)) {
    g.error(*c.kRotaryAt) << "Q and K use different rotary embeddings";
    return failure();
  }
  if (!c.clips.empty()) {
    const auto &[bound, at] = c.clips.begin()->second;
    for (PathKind k : {PathKind::Q, PathKind::K, PathKind::V}) {
      auto it = c.clips.find(int(k));
      if (it == c.clips.end() || it->second.first != bound) {
        g.error(*at) << "clamps " << (it == c.clips.end() ? "not " : "")
                     << "the " << pathName(k) << " projection "
                     << (it == c.clips.end() ? "" : "to another bound ")
                     << "as it does the others; moe.attention's clip_qkv "
                        "clamps Q, K and V to one [-c, c]";
        return failure();
      }
    }
    a.clipQkv = bound;
  }
  a.loc = g.loc(*c.scores);
  a.heads = heads;
  a.kvHeads = kvHeads;
  a.headDim = headDim;
  a.causal = c.causal;
  a.rotary = c.qRotary.has_value();
  if (c.qRotary) {
    a.rotaryBase = c.qRotary->theta;
    a.rotaryLayout = c.qRotary->layout;
    a.rotaryLoc = g.loc(*c.qRotaryAt);
  }
  return success();
}

} // namespace

FailureOr<bool> matchTorchAttention(const OnnxGraph &g, const Region &r,
                                    MatchTarget &t) {
  AttnCtx c(g, r, t.eval, t.blockIndex);
  for (const NodeProto *n : r.nodes)
    if (auto w = weightUse(g, *n); w && w->shape.size() == 2)
      c.projs.push_back(*w);
  if (!findAnchors(c))
    return false;
  RoleWeights weights;
  if (failed(findPv(c)) || failed(assignProjections(c)) ||
      failed(findBiases(c)) || failed(roleWeights(c, weights)))
    return failure();
  c.claimed.insert({c.scores, c.softmax, c.pv});

  // The pre-norm first (its output is where the projections' inputs
  // start); a norm it does not recognise is refused on the input path.
  std::string prefix = blockPrefix(t.blockIndex);
  std::vector<ParamSpec> normParams;
  NormMatch nm;
  FailureOr<bool> norm =
      matchNorm(g, r.input, prefix + ".attn_norm", normParams, nm);
  AttentionSpec &a = t.block.attention;
  if (failed(norm) || failed(claimPaths(c, *norm ? nm.output : r.input)) ||
      failed(headGeometry(c, weights, a)))
    return failure();
  a.prenorm = *norm ? std::optional<NormKind>(nm.kind) : std::nullopt;
  if (*norm) {
    a.epsilon = nm.epsilon;
    c.claimed.insert(nm.nodes.begin(), nm.nodes.end());
  }
  for (const char *role : {"wq", "wk", "wv", "wo"})
    t.params.push_back({prefix + ".attn." + role, weights.shape[role],
                        weights.src[role]});
  if (failed(biasParams(c, weights, prefix, a, t.params)))
    return failure();
  t.params.insert(t.params.end(), normParams.begin(), normParams.end());
  for (const NodeProto *n : c.claimed)
    t.claims.add(n, OpSite::attention);
  return true;
}

} // namespace mlir::moe::frontend
