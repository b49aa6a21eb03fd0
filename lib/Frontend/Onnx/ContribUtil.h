//===- ContribUtil.h - shared checks of the contrib-op matchers --*- C++
//-*-===//
//
// The ONNX Runtime contrib-op matchers (ContribAttention.cpp, ContribMoe.cpp)
// recognise one fused op plus the plain nodes around it (pre-norm, MatMul
// projections, Reshapes). These helpers keep their checks uniform: every
// refusal is an error at the fused node naming the input or attribute that
// is not supported, and a sublayer may hold no node the matcher did not
// account for (so nothing is silently dropped from the model).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_FRONTEND_ONNX_CONTRIBUTIL_H
#define MOE_LIB_FRONTEND_ONNX_CONTRIBUTIL_H

#include "Patterns.h"

#include "llvm/ADT/SmallPtrSet.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::moe::frontend::contrib {

constexpr const char *kMsDomain = "com.microsoft";

/// `v` as printf's %g writes it (attribute values in messages).
std::string formatFloat(double v);

/// `node` is `op` in `domain` ("" and "ai.onnx" are the same domain).
bool isOp(const onnx::NodeProto &node, llvm::StringRef op,
          llvm::StringRef domain = "");

/// Input `i` of `node`, or "" when it is absent (past the end or empty).
llvm::StringRef input(const onnx::NodeProto &node, int i);

/// Fails (error at `node`) when optional input `i`, named `name` in the op's
/// schema, is given; `why` says what the importer cannot model.
LogicalResult requireAbsent(const OnnxGraph &g, const onnx::NodeProto &node,
                            int i, llvm::StringRef name, llvm::StringRef why);

/// Accepts an absent optional input `i` or a constant whose values are all
/// zero (a bias that changes nothing); anything else is an error naming it.
LogicalResult requireZeroOrAbsent(const OnnxGraph &g,
                                  const onnx::NodeProto &node, int i,
                                  llvm::StringRef name);

/// Fails unless the float attribute `name` is absent or equal to `expected`
/// (relative tolerance 1e-4); `why` explains the supported value.
LogicalResult requireFloatAttr(const OnnxGraph &g, const onnx::NodeProto &node,
                               llvm::StringRef name, double expected,
                               llvm::StringRef why);
/// The same for an integer attribute whose default is `dflt`.
LogicalResult requireIntAttr(const OnnxGraph &g, const onnx::NodeProto &node,
                             llvm::StringRef name, int64_t dflt,
                             int64_t expected, llvm::StringRef why);

/// A weight that lives in one initializer, whole.
WeightSource wholeInitializer(const OnnxGraph &g, llvm::StringRef name,
                              bool transpose);

/// `x @ W` with W a 2-D initializer: the MatMul node, W's name and shape.
struct Projection {
  const onnx::NodeProto *node = nullptr;
  std::string weight;
  int64_t rows = 0, cols = 0;
};

/// The MatMul producing `value` from `x` and a 2-D initializer. On anything
/// else, an error at `user` saying its input `role` must be such a
/// projection (naming what produces it instead).
FailureOr<Projection> projectionOf(const OnnxGraph &g, llvm::StringRef value,
                                   llvm::StringRef x,
                                   const onnx::NodeProto &user,
                                   llvm::StringRef role);

/// Fails (error at the first other node) unless every node of `r` is in
/// `used`, is a Constant, or only feeds the shape input of a used Reshape.
LogicalResult
requireAllUsed(const OnnxGraph &g, const Region &r,
               llvm::SmallPtrSetImpl<const onnx::NodeProto *> &used,
               const onnx::NodeProto &anchor, llvm::StringRef sublayer);

/// The single node of `r` for which `pred` holds: null when there is none,
/// failure (error at the second) when there are several.
template <typename Pred>
FailureOr<const onnx::NodeProto *> uniqueNode(const OnnxGraph &g,
                                              const Region &r, Pred pred,
                                              llvm::StringRef what) {
  const onnx::NodeProto *found = nullptr;
  for (const onnx::NodeProto *n : r.nodes) {
    if (!pred(*n))
      continue;
    if (found) {
      g.error(*n) << "a second " << what << " in one sublayer (the first is '"
                  << g.nodeName(*found) << "'); expected one per sublayer";
      return failure();
    }
    found = n;
  }
  return found;
}

} // namespace mlir::moe::frontend::contrib

#endif // MOE_LIB_FRONTEND_ONNX_CONTRIBUTIL_H
