//===- Patterns.h - the ONNX matchers that recognise a block ----*- C++ -*-===//
//
// The importer (OnnxImport.cpp) walks the residual stream of a transformer:
// embedding Gather -> per block (sublayer, residual Add) x 2 -> final norm
// -> LM head MatMul (-> loss). Each sublayer is a Region: the nodes that
// lie between the stream value it reads and the value added back to the
// stream. The matchers below each recognise one way a sublayer is written
// and fill the block's spec and parameters. A matcher returns
//   - true: it recognised the region (spec and params filled),
//   - false: not its pattern (nothing emitted; the importer tries the next),
//   - failure(): its pattern, but unsupported or inconsistent (an error was
//     emitted at the ONNX node responsible).
// When no matcher claims a region, the importer reports the region's first
// unrecognised node.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_FRONTEND_ONNX_PATTERNS_H
#define MOE_LIB_FRONTEND_ONNX_PATTERNS_H

#include "OnnxGraph.h"
#include "StaticEval.h"

#include "moe/Frontend/ModelSpec.h"

#include "mlir/Support/LogicalResult.h"

#include <string>
#include <vector>

namespace mlir::moe::frontend {

/// A Cast that changes nothing in a float32 model (to float32 or float64):
/// represented as a no-op of the op whose nodes it sits between.
bool isNoOpCast(const onnx::NodeProto &n);

/// The nodes computing `output` from `input` (and constants), in graph order.
struct Region {
  std::string input, output;
  std::vector<const onnx::NodeProto *> nodes;
  /// Location used when the region as a whole is reported.
  const onnx::NodeProto *anchor = nullptr;
};

/// Collects the region between two values: every node on a path from
/// `input` to `output` plus the constant-only nodes feeding them.
Region collectRegion(const OnnxGraph &g, llvm::StringRef input,
                     llvm::StringRef output);

/// The nodes a matcher represents, each with the op it becomes. A matcher
/// claims exactly the nodes whose computation that op performs (its
/// projections, norm, rotary, mask application, fp32 no-op Casts, ...);
/// the importer then requires every other node of the region to be
/// statically known (shape plumbing, constants, masks and tables, which
/// count for the op that reads them) and refuses the model otherwise.
struct Claims {
  std::vector<std::pair<const onnx::NodeProto *, OpSite>> nodes;
  void add(const onnx::NodeProto *n, OpSite site) {
    if (n)
      nodes.push_back({n, site});
  }
  void add(const std::vector<const onnx::NodeProto *> &ns, OpSite site) {
    for (const onnx::NodeProto *n : ns)
      add(n, site);
  }
  bool contains(const onnx::NodeProto *n) const {
    for (const auto &c : nodes)
      if (c.first == n)
        return true;
    return false;
  }
};

/// What a sublayer matcher writes into.
struct MatchTarget {
  BlockSpec &block;
  int blockIndex;
  /// Parameters found (names as ModelSpec.h lists them, with sources).
  std::vector<ParamSpec> &params;
  /// The nodes the match represents (filled only when it returns true).
  Claims &claims;
  /// Values known without running the model (masks, tables, shapes).
  StaticEval &eval;
};

/// A norm at the start of `region` reading region.input: LayerNormalization
/// (opset 17), its decomposition (ReduceMean, Sub, Pow, Sqrt, Div, Mul, Add)
/// or RMSNorm's (Pow/Mul, ReduceMean, Add eps, Sqrt/Reciprocal, Mul). On a
/// match: the kind, epsilon, the normalised value's name, and the scale
/// (and bias) params named `<prefix>.scale` / `<prefix>.bias`.
struct NormMatch {
  NormKind kind;
  double epsilon;
  std::string output;
  std::vector<const onnx::NodeProto *> nodes;
};
FailureOr<bool> matchNorm(const OnnxGraph &g, llvm::StringRef input,
                          llvm::StringRef paramPrefix,
                          std::vector<ParamSpec> &params, NormMatch &out);

/// Learned absolute positions (Positions.cpp): the stream's only reader is
/// an Add of a position-table Gather (2-D initializer, rows x m) by ids
/// that put row n at token n of every sample. On a match: the table, its
/// rows, the Add's output and the nodes (Add, views, Gather). Fails, with
/// an error at the Gather, for a position table added any other way.
struct PositionMatch {
  std::string table;
  int64_t rows = 0;
  std::string output;
  std::vector<const onnx::NodeProto *> nodes;
};
FailureOr<bool> matchPositions(const OnnxGraph &g, StaticEval &eval,
                               llvm::StringRef stream, int64_t batch,
                               int64_t seq, int64_t m, PositionMatch &out);

// Attention sublayers (TorchPatterns / ContribPatterns).
/// Q/K/V/softmax/O written out with MatMul (hand-written or
/// nn.MultiheadAttention as exported), with or without rotary and GQA.
FailureOr<bool> matchTorchAttention(const OnnxGraph &g, const Region &r,
                                    MatchTarget &t);
/// com.microsoft MultiHeadAttention / GroupQueryAttention, ai.onnx
/// Attention (opset 23).
FailureOr<bool> matchContribAttention(const OnnxGraph &g, const Region &r,
                                      MatchTarget &t);

// MoE sublayers.
/// Mixtral/HF (softmax -> TopK, expert loop of NonZero/Gather/ScatterND or
/// index_add, SwiGLU), GShard/Tutel (one-hot masks, einsum/MatMul dispatch
/// and combine, capacity), Switch (top-1, capacity, dropping), DeepSeek
/// (shared experts beside routed ones).
FailureOr<bool> matchTorchMoe(const OnnxGraph &g, const Region &r,
                              MatchTarget &t);
/// com.microsoft MoE (and QMoE where feasible).
FailureOr<bool> matchContribMoe(const OnnxGraph &g, const Region &r,
                                MatchTarget &t);
/// A dense FFN sublayer (DeepSeek's first layers): norm, up (and gate), act,
/// down.
FailureOr<bool> matchDenseFfn(const OnnxGraph &g, const Region &r,
                              MatchTarget &t);

} // namespace mlir::moe::frontend

#endif // MOE_LIB_FRONTEND_ONNX_PATTERNS_H
