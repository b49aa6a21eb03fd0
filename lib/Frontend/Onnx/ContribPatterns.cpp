//===- ContribPatterns.cpp - checks shared by the contrib-op matchers -----===//
//
// The matchers themselves are ContribAttention.cpp (com.microsoft
// MultiHeadAttention / GroupQueryAttention / Attention, ai.onnx Attention
// opset 23) and ContribMoe.cpp (com.microsoft MoE; QMoE refused). This file
// holds what they share: optional-input and attribute checks that name what
// is unsupported, MatMul projections with initializer weights, and the rule
// that a sublayer contains nothing the matcher did not account for.
//
//===----------------------------------------------------------------------===//

#include "ContribUtil.h"

#include <cmath>
#include <cstdio>
#include <unordered_set>

using namespace mlir;
using namespace mlir::moe::frontend;

namespace mlir::moe::frontend::contrib {

bool isOp(const onnx::NodeProto &node, llvm::StringRef op,
          llvm::StringRef domain) {
  llvm::StringRef d = node.domain();
  if (d == "ai.onnx")
    d = "";
  if (domain == "ai.onnx")
    domain = "";
  return node.op_type() == op && d == domain;
}

llvm::StringRef input(const onnx::NodeProto &node, int i) {
  if (i < 0 || i >= node.input_size())
    return "";
  return node.input(i);
}

LogicalResult requireAbsent(const OnnxGraph &g, const onnx::NodeProto &node,
                            int i, llvm::StringRef name, llvm::StringRef why) {
  if (input(node, i).empty())
    return success();
  g.error(node) << "input '" << name << "' (#" << i << ", '" << input(node, i)
                << "') is not supported: " << why;
  return failure();
}

LogicalResult requireZeroOrAbsent(const OnnxGraph &g,
                                  const onnx::NodeProto &node, int i,
                                  llvm::StringRef name) {
  llvm::StringRef v = input(node, i);
  if (v.empty())
    return success();
  // Values are only read for constants whose data is present; a bias we
  // cannot see might be non-zero, so it is refused like a non-zero one.
  if (auto vals = g.floatValues(v)) {
    bool zero = true;
    for (double x : *vals)
      zero &= x == 0.0;
    if (zero)
      return success();
    g.error(node) << "input '" << name << "' (#" << i << ", '" << v
                  << "') has non-zero values; biases are not supported by "
                     "the moe ops (only an all-zero bias is accepted)";
    return failure();
  }
  g.error(node) << "input '" << name << "' (#" << i << ", '" << v
                << "') is not a constant with data present; biases are not "
                   "supported (only an all-zero constant bias is accepted)";
  return failure();
}

std::string formatFloat(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

static bool sameFloat(double a, double b) {
  return std::fabs(a - b) <= 1e-4 * std::max(std::fabs(a), std::fabs(b));
}

LogicalResult requireFloatAttr(const OnnxGraph &g, const onnx::NodeProto &node,
                               llvm::StringRef name, double expected,
                               llvm::StringRef why) {
  if (!hasAttr(node, name))
    return success();
  double v = attrFloat(node, name, expected);
  if (sameFloat(v, expected))
    return success();
  g.error(node) << "attribute '" << name << "' = " << formatFloat(v)
                << " is not supported: " << why;
  return failure();
}

LogicalResult requireIntAttr(const OnnxGraph &g, const onnx::NodeProto &node,
                             llvm::StringRef name, int64_t dflt,
                             int64_t expected, llvm::StringRef why) {
  int64_t v = attrInt(node, name, dflt);
  if (v == expected)
    return success();
  g.error(node) << "attribute '" << name << "' = " << v
                << " is not supported: " << why;
  return failure();
}

WeightSource wholeInitializer(const OnnxGraph &g, llvm::StringRef name,
                              bool transpose) {
  WeightSource s;
  s.initializers = {name.str()};
  s.stacked = false;
  s.transpose = transpose;
  s.file = g.path().str();
  return s;
}

FailureOr<Projection> projectionOf(const OnnxGraph &g, llvm::StringRef value,
                                   llvm::StringRef x,
                                   const onnx::NodeProto &user,
                                   llvm::StringRef role) {
  const onnx::NodeProto *p = g.producer(value);
  auto fail = [&](const std::string &found) -> FailureOr<Projection> {
    g.error(user) << "input '" << role << "' ('" << value
                  << "') must be a MatMul of the sublayer's (normalised) "
                     "input '"
                  << x << "' with a 2-D weight initializer; " << found;
    return failure();
  };
  if (!p)
    return fail("it is a graph input or constant");
  if (!isOp(*p, "MatMul"))
    return fail("it is produced by " + p->op_type() + " '" + g.nodeName(*p) +
                "'");
  if (p->input(0) != x)
    return fail("its MatMul '" + g.nodeName(*p) + "' reads '" + p->input(0) +
                "'");
  llvm::StringRef w = p->input(1);
  auto shape = g.shape(w);
  if (!g.constant(w) || !shape || shape->size() != 2)
    return fail("the weight '" + w.str() + "' of MatMul '" + g.nodeName(*p) +
                "' is not a 2-D initializer");
  Projection out;
  out.node = p;
  out.weight = w.str();
  out.rows = (*shape)[0];
  out.cols = (*shape)[1];
  return out;
}

LogicalResult
requireAllUsed(const OnnxGraph &g, const Region &r,
               llvm::SmallPtrSetImpl<const onnx::NodeProto *> &used,
               const onnx::NodeProto &anchor, llvm::StringRef sublayer) {
  std::unordered_set<const onnx::NodeProto *> inRegion(r.nodes.begin(),
                                                       r.nodes.end());
  // Shape computations feeding a Reshape we accepted (Shape, Gather,
  // Concat, ...) carry no weights and no arithmetic on activations.
  std::vector<const onnx::NodeProto *> work;
  for (const onnx::NodeProto *n : r.nodes)
    if (used.count(n) && isOp(*n, "Reshape") && n->input_size() > 1)
      if (const onnx::NodeProto *p = g.producer(n->input(1)))
        work.push_back(p);
  while (!work.empty()) {
    const onnx::NodeProto *n = work.back();
    work.pop_back();
    if (!inRegion.count(n) || !used.insert(n).second)
      continue;
    for (const std::string &in : n->input())
      if (const onnx::NodeProto *p = in.empty() ? nullptr : g.producer(in))
        work.push_back(p);
  }
  for (const onnx::NodeProto *n : r.nodes) {
    if (used.count(n) || isOp(*n, "Constant"))
      continue;
    g.error(*n) << "is not part of the " << sublayer << " pattern around '"
                << g.nodeName(anchor)
                << "' (expected only the pre-norm, MatMul projections with "
                   "initializer weights and the fused op)";
    return failure();
  }
  return success();
}

} // namespace mlir::moe::frontend::contrib
