//===- Rotary.h - recognise rotary embeddings by what they compute -*- C++ -*-===//
//
// Rotary position embeddings are written many ways (rotate_half with Neg and
// Concat, interleaved even/odd lanes with Sub/Add and stack, complex
// multiplication, tables from inv_freq or from cached cos/sin buffers
// gathered by position ids). Instead of matching those node shapes, the
// attention matcher hands the run of nodes between a value `a` on the Q (or
// K) path and a later value `b` to fitRotary, which *evaluates* it
// (StaticEval::probe) on probe tensors: it is rotary when b = R_pos · a for
// every position with the rotation R of one layout and one base theta.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_FRONTEND_ONNX_ROTARY_H
#define MOE_LIB_FRONTEND_ONNX_ROTARY_H

#include "StaticEval.h"

#include "moe/Frontend/ModelSpec.h"

#include <optional>
#include <string>

namespace mlir::moe::frontend {

/// The static shape of `b`: declared / inferred, else found by evaluating
/// it from `a` (whose shape must be known) on zeros.
std::optional<std::vector<int64_t>> shapeFrom(StaticEval &eval,
                                              const OnnxGraph &g,
                                              llvm::StringRef a,
                                              llvm::StringRef b);

struct RotaryFit {
  RotaryLayout layout = RotaryLayout::rotate_half;
  double theta = 10000.0;
};

/// What the nodes from `a` to `b` compute, when they are rotary over the
/// whole head (last axis) with positions 0..seq-1 along an axis of size
/// `seq`. On anything else, `why` says what was found (partial rotary, not
/// linear, not a rotation, shapes unknown) and the result is nullopt.
std::optional<RotaryFit> fitRotary(StaticEval &eval, const OnnxGraph &g,
                                   llvm::StringRef a, llvm::StringRef b,
                                   int64_t seq, std::string &why);

/// True when the nodes from `a` to `b` repeat each KV head for a group of
/// consecutive query heads (out head h = in head h / r: HF repeat_kv,
/// torch.repeat_interleave), which is how moe.attention groups heads. On
/// anything else `why` says what they compute instead (e.g. the tile order
/// h mod kv_heads).
bool fitKvRepeat(StaticEval &eval, const OnnxGraph &g, llvm::StringRef a,
                 llvm::StringRef b, std::string &why);

} // namespace mlir::moe::frontend

#endif // MOE_LIB_FRONTEND_ONNX_ROTARY_H
