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

  static const llvm::StringSet<> ops = {
      "MatMul", "Gemm", "Transpose", "Reshape", "Relu", "Erf", "Tanh", "Gelu",
      "Sigmoid", "Mul", "Add", "Div", "Sub", "Pow", "Sqrt", "Reciprocal",
      "ReduceMean", "LayerNormalization", "Constant", "Cast", "Shape",
      "Gather", "Unsqueeze", "Squeeze", "Concat", "Identity", "Dropout"};
  for (const NodeProto *n : r.nodes)
    if (!ops.contains(n->op_type())) {
      g.error(*n) << "node of type " << n->op_type()
                  << " in a dense FFN sublayer is not understood";
      return failure();
    }
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
  const FfnMatch &f = (*ffns)[0];

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
  return true;
}

} // namespace mlir::moe::frontend
