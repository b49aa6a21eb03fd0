//===- TorchMatch.h - data-flow helpers for the PyTorch-export matchers -*- C++ -*-===//
//
// torch.onnx.export writes one sublayer as dozens of shape-computing nodes
// (Shape/Gather/Unsqueeze/Concat) around a handful that matter (MatMul,
// Softmax, TopK, ...), and the helper nodes differ between torch versions
// and code bases. The matchers therefore do not match node sequences; they
// find the few anchor nodes and reason over data flow inside the region:
// which weight a value comes from, which values depend on the router, what
// a shape subgraph evaluates to. These helpers are that toolkit.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_FRONTEND_ONNX_TORCHMATCH_H
#define MOE_LIB_FRONTEND_ONNX_TORCHMATCH_H

#include "Patterns.h"

#include <functional>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace mlir::moe::frontend::torchpat {

/// Fast membership and in-region producers for a Region.
class RegionView {
public:
  RegionView(const OnnxGraph &g, const Region &r);
  const OnnxGraph &graph() const { return g_; }
  const Region &region() const { return r_; }
  bool contains(const onnx::NodeProto *n) const { return in_.count(n); }
  /// Producer of `value` when it lies in the region, else null.
  const onnx::NodeProto *prod(llvm::StringRef value) const;
  /// Region nodes with this op type, in graph order.
  std::vector<const onnx::NodeProto *> ofType(llvm::StringRef op) const;
  /// Region consumers of `value`.
  std::vector<const onnx::NodeProto *> users(llvm::StringRef value) const;

  /// Every value reachable forward from `seeds` through region nodes.
  std::unordered_set<std::string>
  forwardCone(const std::vector<std::string> &seeds) const;
  /// Every region node reachable backward from `value` (its producers,
  /// recursively), not crossing the nodes for which `stop` is true.
  std::vector<const onnx::NodeProto *>
  backwardNodes(llvm::StringRef value,
                const std::function<bool(const onnx::NodeProto &)> &stop =
                    nullptr) const;

private:
  const OnnxGraph &g_;
  const Region &r_;
  std::unordered_set<const onnx::NodeProto *> in_;
};

/// A projection with a constant weight: MatMul x·W, Gemm, or Einsum /
/// batched MatMul with a stacked [E, ., .] weight.
struct WeightUse {
  const onnx::NodeProto *node = nullptr;
  /// The activation operand (the non-weight input).
  std::string data;
  /// The initializer and how to turn it into the `moe` layout (in x out,
  /// or E x in x out).
  WeightSource source;
  /// Shape in the `moe` layout.
  std::vector<int64_t> shape;
  /// The nodes that compute the weight from its initializer when it is a
  /// block of rows of one (DBRX's experts: w1.view(E, F, M).chunk(E)[e]),
  /// in graph order; empty for a plain initializer (or its Transpose).
  std::vector<const onnx::NodeProto *> chain;
};

/// Recognises `node` as a weight projection: MatMul / Gemm whose second
/// operand is a 2-D initializer or a Transpose of one (torch Linear), or a
/// MatMul / Einsum whose second operand is a 3-D initializer (stacked
/// experts), or a MatMul whose second operand is a block of consecutive
/// rows of a 2-D initializer, or its transpose, computed by movement ops
/// (rowBlockWeight). nullopt otherwise.
std::optional<WeightUse> weightUse(const OnnxGraph &g,
                                   const onnx::NodeProto &node);

/// Evaluates a small integer subgraph (Constant, Shape of a statically
/// shaped value, Gather, Unsqueeze, Squeeze, Concat, Cast, Slice, Add, Sub,
/// Mul, Div, Identity, Reshape of a constant). nullopt when any part is
/// unknown.
std::optional<std::vector<int64_t>> evalInts(const OnnxGraph &g,
                                             llvm::StringRef value,
                                             int depth = 0);
/// The rank of `value`: its static shape's, else derived through the ops
/// torch puts between a reshape and a routing mask (Reshape targets, OneHot,
/// ArgMax, Gather, elementwise ops). nullopt when unknown.
std::optional<int64_t> rankOf(const OnnxGraph &g, llvm::StringRef value,
                              int depth = 0);

/// A float scalar constant (through Cast / Identity / Constant).
std::optional<double> scalarConst(const OnnxGraph &g, llvm::StringRef value);

/// True when `value` is a constant or computed from constants only.
bool isConstantValue(const OnnxGraph &g, llvm::StringRef value, int depth = 0);

/// The file a WeightSource's initializers come from.
inline void attachFile(const OnnxGraph &g, WeightSource &s) {
  s.file = g.path().str();
}

/// The initializer `value` is (through Identity nodes), or "".
std::string initializerOf(const OnnxGraph &g, std::string value);

/// Emits "<what> is not supported" at a Linear bias Add: an Add whose one
/// operand is a weight projection's output and the other a 1-D
/// initializer. Returns failure() after emitting, success() when none.
LogicalResult rejectBiases(const RegionView &rv, llvm::StringRef sublayer);

/// One FFN (an expert, the shared experts or a dense FFN): up, optional
/// gate (the activated one in a gated FFN), down, and the activation.
struct FfnMatch {
  std::optional<WeightUse> up, gate;
  WeightUse down;
  Activation activation = Activation::gelu;
  bool gated() const { return gate.has_value(); }
  int64_t hidden() const;
};

/// Groups projections into FFNs: each `down` (a projection whose input is
/// computed from other projections of the set) with the projections in its
/// backward cone; classifies the activation between them. Emits an error
/// and returns failure() on anything it cannot classify.
FailureOr<std::vector<FfnMatch>>
groupFfns(const RegionView &rv, const std::vector<WeightUse> &projections);

/// The nodes between an FFN's up/gate projections and its down projection
/// (the activation and the gating product; casts), not the projections.
std::vector<const onnx::NodeProto *> ffnInner(const RegionView &rv,
                                              const FfnMatch &f);

/// Evaluates the nodes between the FFN's up (and gate) outputs and its down
/// input on probe values (StaticEval::probe) and sets f.activation to the
/// `moe` activation they compute exactly: relu, gelu (erf), silu; gated:
/// act(gate) * up (swapping up and gate when the other one is activated).
/// Anything else (GELU's tanh approximation, a scaled or shifted
/// activation, ...) is an error at the FFN's down projection.
LogicalResult probeActivation(StaticEval &eval, const RegionView &rv,
                              FfnMatch &f);

/// The projection node and its weight-side Transpose / Identity (in the
/// region): the nodes a projection claims.
std::vector<const onnx::NodeProto *> projectionNodes(const RegionView &rv,
                                                     const WeightUse &w);

/// The recognised pieces of a routed MoE sublayer (TorchMoe.cpp).
struct RoutingParts {
  const RegionView &rv;
  StaticEval &eval;
  const onnx::NodeProto *router;
  const std::vector<FfnMatch> &experts, &shared;
  const NormMatch *norm;
  bool normalize;
  /// Qwen2-MoE's shared-expert gate projection (M x 1), or null.
  const WeightUse *sharedGate = nullptr;
};

/// Claims every node of the MoE sublayer for the `moe` op that computes it
/// (MoeRouting.cpp): norm, gate, dispatch, experts, combine, shared
/// experts and their add; an error at the first node that is none of
/// these.
LogicalResult claimRouting(const RoutingParts &p, Claims &claims);

/// Whether per-expert weights that are row blocks of a parameter
/// (WeightUse::chain non-empty) are blocks of one size at a constant stride
/// in expert order, the form a stacked #moe.source slice can name; true
/// for weights that are not sliced at all.
bool expertSlicesOk(const std::vector<const WeightUse *> &ws);

/// Adds params "<prefix>.{up,gate,down}" for a list of FFNs: stacked along
/// an expert axis when `stacked`, else the single FFN.
void addFfnParams(const OnnxGraph &g, const std::vector<FfnMatch> &ffns,
                  bool stacked, const std::string &prefix,
                  std::vector<ParamSpec> &params);

/// "block<i>".
std::string blockPrefix(int blockIndex);

} // namespace mlir::moe::frontend::torchpat

#endif // MOE_LIB_FRONTEND_ONNX_TORCHMATCH_H
