//===- StaticEval.h - values of an ONNX graph known without running it -*- C++ -*-===//
//
// Much of what torch.onnx.export writes is known before the model runs:
// shape arithmetic (Shape of a statically shaped value, Gather, Concat),
// masks (HF's full(min) / triu / Where / Expand causal mask), rotary sin/cos
// tables (Range, Einsum/Gather of inv_freq, Cos, Sin). StaticEval computes
// such values on small tensors (double precision), so that the matchers
// decide what a node means by its *value*, not by the shape of the
// subgraph that computes it: a mask is causal when its values are, a rotary
// table is rotary when it rotates.
//
// It also probes subgraphs: `probe` evaluates a value with chosen tensors
// substituted for some of the graph's values (e.g. basis vectors for the
// input of a rotary segment), which tells the matchers what linear or
// elementwise function a run of nodes computes.
//
// Evaluation never aborts: an op it does not know, a value that depends on
// a graph input's data, or a tensor above kMaxElements gives "unknown".
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_FRONTEND_ONNX_STATICEVAL_H
#define MOE_LIB_FRONTEND_ONNX_STATICEVAL_H

#include "OnnxGraph.h"

#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace mlir::moe::frontend {

/// A small dense tensor: row-major values as doubles (integers and booleans
/// are exact), with whether ONNX holds it as a floating-point type.
struct StaticTensor {
  std::vector<int64_t> shape;
  std::vector<double> data;
  bool isFloat = true;
  /// Only the shape is known (StaticEval::Mode::shapes): data is empty.
  bool shapeOnly = false;

  int64_t numel() const;
  /// Row-major strides of `shape`.
  std::vector<int64_t> strides() const;
};

class StaticEval {
public:
  /// Largest tensor evaluated (elements).
  static constexpr int64_t kMaxElements = int64_t(1) << 22;

  /// values: what is known without running the model (the matchers).
  /// shapes: also every computed value's shape, from the graph inputs'
  /// declared shapes (OnnxGraph's shape inference: ONNX's own data
  /// propagation crashes on malformed graphs); large constants are read
  /// for their dims only.
  enum class Mode { values, shapes };
  explicit StaticEval(const OnnxGraph &g, Mode mode = Mode::values)
      : g_(g), mode_(mode) {}

  /// The value of `v` when it depends only on constants and static shapes;
  /// null otherwise. The pointer stays valid for the evaluator's lifetime.
  const StaticTensor *value(llvm::StringRef v);
  bool known(llvm::StringRef v) { return value(v) != nullptr; }
  /// True when every output of `node` is statically known.
  bool knownNode(const onnx::NodeProto &node);

  /// Evaluates `target` with `inputs` (value name -> tensor) substituted;
  /// everything else `target` needs must be statically known. nullopt when
  /// it is not, or an op on the way is not supported.
  std::optional<StaticTensor>
  probe(const std::map<std::string, StaticTensor> &inputs,
        llvm::StringRef target);

private:
  using Memo = std::unordered_map<std::string, std::optional<StaticTensor>>;
  /// Evaluates `v` into `memo`; `overrides` (may be null) win; `base`
  /// (may be null) supplies statically known values.
  const StaticTensor *compute(const std::string &v, Memo &memo,
                              const std::map<std::string, StaticTensor> *overrides,
                              Memo *base);
  std::optional<StaticTensor> leaf(const std::string &v) const;

  const OnnxGraph &g_;
  Mode mode_;
  Memo memo_;
};

/// Evaluates one node on known inputs: one tensor per output (nullopt for
/// an output it cannot compute). Exposed for the tests' probe tool.
std::vector<std::optional<StaticTensor>>
evalNode(const onnx::NodeProto &node,
         const std::vector<const StaticTensor *> &inputs, int64_t opset);

} // namespace mlir::moe::frontend

#endif // MOE_LIB_FRONTEND_ONNX_STATICEVAL_H
