//===- OnnxGraph.h - a loaded ONNX model with use-def lookups ---*- C++ -*-===//
//
// Owns the parsed onnx::ModelProto (libonnx, ONNX_ML=1) and indexes it for
// the pattern matchers: producer and consumers of each value, initializers
// (and Constant nodes) by name, static shapes from value_info / ONNX shape
// inference, and each node's MLIR location. Loading never aborts: a missing
// file, a file that is not ONNX, a truncated protobuf or a graph that is not
// well formed is an error diagnostic naming the file.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_FRONTEND_ONNX_ONNXGRAPH_H
#define MOE_LIB_FRONTEND_ONNX_ONNXGRAPH_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <onnx/onnx_pb.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace mlir::moe::frontend {

class OnnxGraph {
public:
  /// Parses `path`; on failure emits an error at FileLineColLoc(path) and
  /// returns null.
  static std::unique_ptr<OnnxGraph> load(llvm::StringRef path,
                                         MLIRContext *ctx);

  /// Parses an in-memory model (`path` names it in diagnostics and anchors
  /// relative external-data locations). Same errors as load().
  static std::unique_ptr<OnnxGraph>
  parse(llvm::StringRef bytes, llvm::StringRef path, MLIRContext *ctx);

  const onnx::ModelProto &model() const { return model_; }
  const onnx::GraphProto &graph() const { return model_.graph(); }
  llvm::StringRef path() const { return path_; }
  MLIRContext *context() const { return ctx_; }

  /// The node that produces `value`; null for graph inputs and initializers.
  const onnx::NodeProto *producer(llvm::StringRef value) const;
  /// The nodes that read `value`, in graph order.
  llvm::ArrayRef<const onnx::NodeProto *>
  consumers(llvm::StringRef value) const;
  /// An initializer, or the `value` attribute of a Constant node, by name.
  const onnx::TensorProto *constant(llvm::StringRef value) const;
  /// True when `value` is an initializer (weights), not a Constant node.
  bool isInitializer(llvm::StringRef value) const;
  /// True when the constant's data is present: inline, or an external-data
  /// file that exists next to the model and is long enough.
  bool hasData(llvm::StringRef value) const;
  /// Integer / float contents of a small constant (shape vectors, axes,
  /// scalars); nullopt when not constant or its data is absent.
  std::optional<std::vector<int64_t>> intValues(llvm::StringRef value) const;
  std::optional<std::vector<double>> floatValues(llvm::StringRef value) const;
  /// Static shape (from initializers, graph inputs/outputs, value_info and
  /// ONNX shape inference); a dynamic dimension is -1; nullopt if unknown.
  std::optional<std::vector<int64_t>> shape(llvm::StringRef value) const;
  /// Opset version imported for a domain ("" = ai.onnx); 0 if absent.
  int64_t opset(llvm::StringRef domain = "") const;

  /// NameLoc(node name, or "<op_type> #<index>" when unnamed) inside
  /// FileLineColLoc(file, 0, 0).
  Location loc(const onnx::NodeProto &node) const;
  Location fileLoc() const;
  /// Emits an error at `node` (its op type and name are in the location).
  InFlightDiagnostic error(const onnx::NodeProto &node) const;
  /// The node's name, or "<op_type> #<index>" when it has none.
  std::string nodeName(const onnx::NodeProto &node) const;
  /// True when `node` computes from a graph input (directly or through
  /// other nodes); false for constant-only nodes (shape arithmetic on
  /// initializers, Constant, weight transposes).
  bool readsInputs(const onnx::NodeProto &node) const {
    return dynamic_.count(&node) != 0;
  }

  /// All nodes in graph (topological) order.
  llvm::ArrayRef<const onnx::NodeProto *> nodes() const { return nodes_; }
  /// Index of `node` in nodes().
  size_t indexOf(const onnx::NodeProto &node) const;

private:
  OnnxGraph() = default;
  LogicalResult index();
  LogicalResult checkArity(const onnx::NodeProto &node) const;
  void addConstantNode(const onnx::NodeProto &node);
  void inferShapes();
  void propagateShapes();
  std::optional<std::string> rawBytes(const onnx::TensorProto &t,
                                      uint64_t limit) const;
  /// A small constant's INT32/INT64 values (and, with `floatsToo`,
  /// FLOAT/DOUBLE ones) as T, from raw or typed fields: what intValues and
  /// floatValues share.
  template <typename T>
  std::optional<std::vector<T>> numbers(llvm::StringRef value,
                                        bool floatsToo) const;
  /// Constant nodes' values as tensors (stable addresses for constants_).
  std::deque<onnx::TensorProto> ownedConstants_;
  onnx::ModelProto model_;
  std::string path_;
  MLIRContext *ctx_ = nullptr;
  std::vector<const onnx::NodeProto *> nodes_;
  std::unordered_map<std::string, const onnx::NodeProto *> producers_;
  std::unordered_map<std::string, std::vector<const onnx::NodeProto *>>
      consumers_;
  std::unordered_map<std::string, const onnx::TensorProto *> constants_;
  std::unordered_map<std::string, bool> isInitializer_;
  std::unordered_map<std::string, std::vector<int64_t>> shapes_;
  std::unordered_map<const onnx::NodeProto *, size_t> index_;
  std::unordered_set<const onnx::NodeProto *> dynamic_;
};

/// Reads an ONNX attribute of a node with a default.
int64_t attrInt(const onnx::NodeProto &node, llvm::StringRef name,
                int64_t dflt);
double attrFloat(const onnx::NodeProto &node, llvm::StringRef name,
                 double dflt);
std::string attrString(const onnx::NodeProto &node, llvm::StringRef name,
                       llvm::StringRef dflt = "");
std::vector<int64_t> attrInts(const onnx::NodeProto &node,
                              llvm::StringRef name);
bool hasAttr(const onnx::NodeProto &node, llvm::StringRef name);

} // namespace mlir::moe::frontend

#endif // MOE_LIB_FRONTEND_ONNX_ONNXGRAPH_H
