//===- DenseFfn.cpp - a dense FFN sublayer (no routing) -------------------===//
//
// DeepSeek's first layers (and any dense transformer block): norm, up (and
// a gate projection for SwiGLU), activation, down, applied to every token.
// The block becomes BlockSpec::moe = nullopt with denseHidden; the builder
// emits it as a moe.shared_expert with parameters block<i>.shared.* and the
// norm as block<i>.moe_norm.*.
//
//===----------------------------------------------------------------------===//
#include "TorchMatch.h"

#include "llvm/ADT/StringSet.h"

#include <unordered_set>

namespace mlir::moe::frontend {

using namespace torchpat;
using onnx::NodeProto;

FailureOr<bool> matchDenseFfn(const OnnxGraph &g, const Region &r,
                              MatchTarget &t) {
  RegionView rv(g, r);
  // Routing or attention anchors: not a dense FFN.
  for (const char *op : {"Softmax", "TopK", "ArgMax", "CumSum", "NonZero",
                         "OneHot", "MultiHeadAttention", "Attention", "MoE"})
    if (!rv.ofType(op).empty())
      return false;
  std::vector<WeightUse> projs;
  for (const NodeProto *n : r.nodes)
    if (auto w = weightUse(g, *n)) {
      if (w->shape.size() != 2)
        return false;
      projs.push_back(*w);
    }
  if (projs.size() < 2 || projs.size() > 3)
    return false;

  if (failed(rejectBiases(rv, "FFN")))
    return failure();
  auto ffns = groupFfns(rv, projs);
  if (failed(ffns))
    return failure();
  if (ffns->size() != 1) {
    g.error(*projs.back().node) << "dense sublayer holds " << ffns->size()
                                << " FFNs; expected one";
    return failure();
  }
  FfnMatch &f = (*ffns)[0];
  if (failed(probeActivation(t.eval, rv, f)))
    return failure();

  std::string prefix = blockPrefix(t.blockIndex);
  std::vector<ParamSpec> normParams;
  NormMatch nm;
  FailureOr<bool> norm =
      matchNorm(g, r.input, prefix + ".moe_norm", normParams, nm);
  if (failed(norm))
    return failure();
  BlockSpec &b = t.block;
  b.moe = std::nullopt;
  b.denseHidden = f.hidden();
  b.denseActivation = f.activation;
  b.denseGated = f.gated();
  if (*norm) {
    b.densePrenorm = nm.kind;
    b.denseEpsilon = nm.epsilon;
  } else {
    b.densePrenorm = std::nullopt;
  }
  t.params.insert(t.params.end(), normParams.begin(), normParams.end());
  addFfnParams(g, *ffns, /*stacked=*/false, prefix + ".shared", t.params);
  // Claims: the norm, the FFN (projections and what lies between them) and
  // the token reshapes around it; anything else is left for the importer
  // to refuse by name.
  if (*norm)
    t.claims.add(nm.nodes, OpSite::ffnNorm);
  std::vector<const NodeProto *> own = ffnInner(rv, f);
  for (const WeightUse *w : {f.up ? &*f.up : nullptr,
                             f.gate ? &*f.gate : nullptr, &f.down})
    if (w) {
      auto ps = projectionNodes(rv, *w);
      own.insert(own.end(), ps.begin(), ps.end());
    }
  t.claims.add(own, OpSite::sharedExpert);
  std::unordered_set<const NodeProto *> mine(own.begin(), own.end());
  if (*norm)
    mine.insert(nm.nodes.begin(), nm.nodes.end());
  static const llvm::StringSet<> layout = {"Reshape", "Flatten", "Squeeze",
                                           "Unsqueeze", "Identity"};
  for (const NodeProto *n : r.nodes)
    if (!mine.count(n) && (layout.contains(n->op_type()) || isNoOpCast(*n)))
      t.claims.add(n, OpSite::sharedExpert);
  return true;
}

} // namespace mlir::moe::frontend
