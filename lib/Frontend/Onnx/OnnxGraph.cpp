//===- OnnxGraph.cpp - load, check and index an ONNX model ----------------===//
//
// Parsing goes through protobuf's CodedInputStream (no exceptions), shape
// inference through libonnx (which throws: this file is compiled with
// -fexceptions and nothing thrown leaves it). Every way a file can be wrong
// (missing, not protobuf, truncated, no graph, a node reading a value
// nothing produces) is an error diagnostic naming the file, and the node
// where there is one; loading never aborts.
//
//===----------------------------------------------------------------------===//

#include "OnnxGraph.h"
#include "StaticEval.h"
#include "moe/Frontend/TensorData.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <google/protobuf/io/coded_stream.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <cstring>
#include <fstream>
#include <limits>

using namespace mlir;
using namespace mlir::moe::frontend;

namespace {

/// Shape of a value's type: -1 for a dynamic dim; nullopt when the type is
/// not a tensor or carries no shape.
std::optional<std::vector<int64_t>> shapeOf(const onnx::TypeProto &type) {
  if (!type.has_tensor_type() || !type.tensor_type().has_shape())
    return std::nullopt;
  std::vector<int64_t> dims;
  for (const auto &d : type.tensor_type().shape().dim())
    dims.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value()
                                                           : -1);
  return dims;
}

} // namespace

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

std::unique_ptr<OnnxGraph> OnnxGraph::load(llvm::StringRef path,
                                           MLIRContext *ctx) {
  Location fileLoc = FileLineColLoc::get(ctx, path, 0, 0);
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf) {
    emitError(fileLoc) << "cannot open ONNX model '" << path
                       << "': " << buf.getError().message();
    return nullptr;
  }
  return parse((*buf)->getBuffer(), path, ctx);
}

std::unique_ptr<OnnxGraph> OnnxGraph::parse(llvm::StringRef bytes,
                                            llvm::StringRef path,
                                            MLIRContext *ctx) {
  Location fileLoc = FileLineColLoc::get(ctx, path, 0, 0);
  auto notOnnx = [&](llvm::StringRef why) {
    emitError(fileLoc) << "'" << path << "' is not a valid ONNX model (" << why
                       << ")";
    return nullptr;
  };
  if (bytes.size() > size_t(std::numeric_limits<int>::max()))
    return notOnnx("larger than 2 GiB; keep the weights as external data");

  std::unique_ptr<OnnxGraph> g(new OnnxGraph());
  g->path_ = path.str();
  g->ctx_ = ctx;
  {
    google::protobuf::io::CodedInputStream in(
        reinterpret_cast<const uint8_t *>(bytes.data()), int(bytes.size()));
    // Models near protobuf's 64 MiB default must still load; the buffer is
    // already bounded by the check above.
    in.SetTotalBytesLimit(std::numeric_limits<int>::max());
    if (!g->model_.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
      return notOnnx("protobuf parse failed: truncated or not a ModelProto");
  }
  // Random bytes can parse as a protobuf made of unknown fields; a real
  // model has an IR version and a graph.
  if (g->model_.ir_version() <= 0)
    return notOnnx("no ir_version");
  if (!g->model_.has_graph())
    return notOnnx("no graph");
  if (g->model_.graph().node_size() == 0)
    return notOnnx("the graph has no nodes");
  if (failed(g->index()))
    return nullptr;
  g->inferShapes();
  return g;
}

LogicalResult OnnxGraph::index() {
  const onnx::GraphProto &graph = model_.graph();
  // Values available before the first node: graph inputs and initializers.
  std::unordered_map<std::string, bool> defined;
  for (const auto &t : graph.initializer()) {
    constants_[t.name()] = &t;
    isInitializer_[t.name()] = true;
    defined[t.name()] = true;
    std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    shapes_[t.name()] = dims;
  }
  for (const auto &vi : graph.input()) {
    defined[vi.name()] = true;
    if (auto s = shapeOf(vi.type()); s && !shapes_.count(vi.name()))
      shapes_[vi.name()] = *s;
  }
  for (const auto &vi : graph.value_info())
    if (auto s = shapeOf(vi.type()))
      shapes_[vi.name()] = *s;
  for (const auto &vi : graph.output())
    if (auto s = shapeOf(vi.type()))
      shapes_[vi.name()] = *s;

  for (const auto &node : graph.node()) {
    index_[&node] = nodes_.size();
    nodes_.push_back(&node);
  }
  // Every input must already exist when its node runs (ONNX requires
  // topological order); "" is an omitted optional input.
  // Values that depend on a graph input (not an initializer); computed in
  // the same forward pass, which the order check makes valid.
  std::unordered_set<std::string> dynamicValues;
  for (const auto &vi : graph.input())
    if (!isInitializer_.count(vi.name()))
      dynamicValues.insert(vi.name());
  for (const onnx::NodeProto *node : nodes_) {
    bool dynamic = false;
    for (const std::string &in : node->input()) {
      if (in.empty())
        continue;
      if (!defined.count(in)) {
        error(*node) << "input '" << in
                     << "' is not produced by any earlier node, graph input "
                        "or initializer";
        return failure();
      }
      dynamic |= dynamicValues.count(in) != 0;
      auto &c = consumers_[in];
      if (c.empty() || c.back() != node)
        c.push_back(node);
    }
    if (dynamic)
      dynamic_.insert(node);
    for (const std::string &out : node->output()) {
      if (out.empty())
        continue;
      if (defined.count(out)) {
        auto prev = producers_.find(out);
        error(*node) << "output '" << out << "' is already "
                     << (prev != producers_.end()
                             ? "produced by node '" + nodeName(*prev->second) +
                                   "'"
                             : std::string("a graph input or initializer"))
                     << "; ONNX values are assigned once";
        return failure();
      }
      producers_[out] = node;
      defined[out] = true;
      if (dynamic)
        dynamicValues.insert(out);
    }
    if (failed(checkArity(*node)))
      return failure();
    if (node->op_type() == "Constant" && node->domain().empty() &&
        node->output_size() == 1)
      addConstantNode(*node);
  }
  return success();
}

/// Input / output counts against the ai.onnx schema of the model's opset:
/// the matchers read inputs by position, and a node with too few (a
/// corrupt file, a buggy exporter) must be an error here, not an
/// out-of-range access there. Ops libonnx does not know (com.microsoft,
/// newer than its opsets) are left to their matchers.
LogicalResult OnnxGraph::checkArity(const onnx::NodeProto &node) const {
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    return success();
  int64_t version = opset("");
  if (version <= 0)
    version = std::numeric_limits<int>::max();
  const onnx::OpSchema *schema = onnx::OpSchemaRegistry::Schema(
      node.op_type(), int(std::min<int64_t>(version, INT32_MAX)), "");
  if (!schema)
    return success();
  auto check = [&](int n, int lo, int hi, llvm::StringRef what) {
    if (n >= lo && n <= hi)
      return success();
    InFlightDiagnostic d = error(node);
    d << "has " << n << " " << what << (n == 1 ? "" : "s") << "; "
      << node.op_type() << " (opset " << schema->SinceVersion() << ") takes ";
    if (lo == hi)
      d << lo;
    else if (hi == std::numeric_limits<int>::max())
      d << "at least " << lo;
    else
      d << lo << " to " << hi;
    return failure();
  };
  if (failed(check(node.input_size(), schema->min_input(), schema->max_input(),
                   "input")) ||
      failed(check(node.output_size(), schema->min_output(),
                   schema->max_output(), "output")))
    return failure();
  return success();
}

/// Turns a Constant node's value (any of its attribute spellings) into a
/// TensorProto so that constant() serves it like an initializer.
void OnnxGraph::addConstantNode(const onnx::NodeProto &node) {
  for (const auto &a : node.attribute()) {
    onnx::TensorProto t;
    if (a.name() == "value" && a.has_t()) {
      t = a.t();
    } else if (a.name() == "value_float") {
      t.set_data_type(onnx::TensorProto::FLOAT);
      t.add_float_data(a.f());
    } else if (a.name() == "value_floats") {
      t.set_data_type(onnx::TensorProto::FLOAT);
      t.add_dims(a.floats_size());
      for (float f : a.floats())
        t.add_float_data(f);
    } else if (a.name() == "value_int") {
      t.set_data_type(onnx::TensorProto::INT64);
      t.add_int64_data(a.i());
    } else if (a.name() == "value_ints") {
      t.set_data_type(onnx::TensorProto::INT64);
      t.add_dims(a.ints_size());
      for (int64_t i : a.ints())
        t.add_int64_data(i);
    } else {
      continue;
    }
    const std::string &out = node.output(0);
    t.set_name(out);
    ownedConstants_.push_back(std::move(t));
    constants_[out] = &ownedConstants_.back();
    shapes_[out] = std::vector<int64_t>(ownedConstants_.back().dims().begin(),
                                        ownedConstants_.back().dims().end());
    return;
  }
}

/// Runs ONNX shape inference on a copy of the model whose large tensors'
/// bytes are dropped (inference needs their dims, not their values; small
/// ones such as Reshape's shape stay). Declared shapes win over inferred
/// ones. Inference throws on malformed graphs and knows no opset-23 or
/// com.microsoft ops: then the model imports with the declared shapes only.
void OnnxGraph::inferShapes() {
  onnx::ModelProto copy;
  try {
    copy = model_;
    for (auto &t : *copy.mutable_graph()->mutable_initializer())
      if (t.raw_data().size() > 4096)
        t.clear_raw_data();
    onnx::ShapeInferenceOptions opts(/*check_type=*/false, /*error_mode=*/0,
                                     /*data_prop=*/false);
    onnx::shape_inference::InferShapes(copy, onnx::OpSchemaRegistry::Instance(),
                                       opts);
  } catch (const std::exception &) {
    return;
  } catch (...) {
    return;
  }
  for (const auto &vi : copy.graph().value_info())
    if (!shapes_.count(vi.name()))
      if (auto s = shapeOf(vi.type()))
        shapes_[vi.name()] = *s;
  for (const auto &vi : copy.graph().output())
    if (!shapes_.count(vi.name()))
      if (auto s = shapeOf(vi.type()))
        shapes_[vi.name()] = *s;
  propagateShapes();
}

/// ONNX's own inference cannot see through shape arithmetic (Reshape
/// targets built from Shape / Gather / Concat) without its data
/// propagation, which crashes on malformed graphs (the fuzzer found a
/// SEGV inside libonnx 1.12). StaticEval in shapes mode does that part:
/// from the graph inputs' declared shapes, every value whose shape
/// follows gets it, in graph order.
void OnnxGraph::propagateShapes() {
  StaticEval eval(*this, StaticEval::Mode::shapes);
  auto known = [](const std::vector<int64_t> &s) {
    return llvm::all_of(s, [](int64_t d) { return d >= 0; });
  };
  for (const onnx::NodeProto *n : nodes_)
    for (const std::string &o : n->output()) {
      if (o.empty())
        continue;
      auto it = shapes_.find(o);
      if (it != shapes_.end() && known(it->second))
        continue;
      if (const StaticTensor *t = eval.value(o))
        shapes_[o] = t->shape;
    }
}

//===----------------------------------------------------------------------===//
// Lookups
//===----------------------------------------------------------------------===//

const onnx::NodeProto *OnnxGraph::producer(llvm::StringRef value) const {
  auto it = producers_.find(value.str());
  return it == producers_.end() ? nullptr : it->second;
}

llvm::ArrayRef<const onnx::NodeProto *>
OnnxGraph::consumers(llvm::StringRef value) const {
  auto it = consumers_.find(value.str());
  if (it == consumers_.end())
    return {};
  return it->second;
}

const onnx::TensorProto *OnnxGraph::constant(llvm::StringRef value) const {
  auto it = constants_.find(value.str());
  return it == constants_.end() ? nullptr : it->second;
}

bool OnnxGraph::isInitializer(llvm::StringRef value) const {
  return isInitializer_.count(value.str()) != 0;
}

bool OnnxGraph::hasData(llvm::StringRef value) const {
  const onnx::TensorProto *t = constant(value);
  if (!t)
    return false;
  if (t->data_location() != onnx::TensorProto::EXTERNAL)
    return true; // inline: an empty tensor has no bytes to miss
  auto r = externalRange(*t, llvm::sys::path::parent_path(path_));
  if (!r)
    return false;
  auto size = regularFileSize(*r);
  return size && r->offset <= *size && r->length <= *size - r->offset;
}

/// The raw little-endian bytes of a constant: raw_data, or the slice of its
/// external file. Empty when the data is in typed fields or absent.
std::optional<std::string> OnnxGraph::rawBytes(const onnx::TensorProto &t,
                                               uint64_t limit) const {
  if (t.data_location() != onnx::TensorProto::EXTERNAL) {
    if (!t.has_raw_data())
      return std::nullopt;
    return t.raw_data();
  }
  auto r = externalRange(t, llvm::sys::path::parent_path(path_));
  if (!r || r->length > limit)
    return std::nullopt;
  return readExternal(*r);
}

namespace {
template <typename T> T readLE(const char *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
// Small constants only: shape vectors, axes, scalars, epsilons.
constexpr uint64_t kMaxValues = uint64_t(1) << 24;
} // namespace

template <typename T>
std::optional<std::vector<T>> OnnxGraph::numbers(llvm::StringRef value,
                                                 bool floatsToo) const {
  const onnx::TensorProto *t = constant(value);
  if (!t)
    return std::nullopt;
  auto n = elementCount(*t);
  if (!n || *n > kMaxValues)
    return std::nullopt;
  int32_t dt = t->data_type();
  bool isByte = dt == onnx::TensorProto::BOOL ||
                dt == onnx::TensorProto::UINT8 || dt == onnx::TensorProto::INT8;
  bool isInt = dt == onnx::TensorProto::INT64 ||
               dt == onnx::TensorProto::INT32 || isByte;
  bool isFloat =
      dt == onnx::TensorProto::FLOAT || dt == onnx::TensorProto::DOUBLE;
  if (!isInt && !(floatsToo && isFloat))
    return std::nullopt;
  std::vector<T> out;
  if (auto raw = rawBytes(*t, kMaxValues * 8)) {
    if (raw->size() != *n * elementSize(dt))
      return std::nullopt;
    const char *p = raw->data();
    for (uint64_t i = 0; i < *n; ++i)
      switch (dt) {
      case onnx::TensorProto::INT64:
        out.push_back(T(readLE<int64_t>(p + i * 8)));
        break;
      case onnx::TensorProto::INT32:
        out.push_back(T(readLE<int32_t>(p + i * 4)));
        break;
      case onnx::TensorProto::INT8:
        out.push_back(T(readLE<int8_t>(p + i)));
        break;
      case onnx::TensorProto::BOOL:
      case onnx::TensorProto::UINT8:
        out.push_back(T(readLE<uint8_t>(p + i)));
        break;
      case onnx::TensorProto::FLOAT:
        out.push_back(T(readLE<float>(p + i * 4)));
        break;
      default:
        out.push_back(T(readLE<double>(p + i * 8)));
      }
    return out;
  }
  if (t->data_location() == onnx::TensorProto::EXTERNAL)
    return std::nullopt;
  auto take = [&](const auto &field) -> std::optional<std::vector<T>> {
    if (uint64_t(field.size()) != *n)
      return std::nullopt;
    out.assign(field.begin(), field.end());
    return out;
  };
  switch (dt) {
  case onnx::TensorProto::INT64:
    return take(t->int64_data());
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::BOOL:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::INT8:
    return take(t->int32_data()); // ONNX keeps narrow ints in int32_data
  case onnx::TensorProto::FLOAT:
    return take(t->float_data());
  default:
    return take(t->double_data());
  }
}

std::optional<std::vector<int64_t>>
OnnxGraph::intValues(llvm::StringRef value) const {
  return numbers<int64_t>(value, /*floatsToo=*/false);
}

std::optional<std::vector<double>>
OnnxGraph::floatValues(llvm::StringRef value) const {
  return numbers<double>(value, /*floatsToo=*/true);
}

std::optional<std::vector<int64_t>>
OnnxGraph::shape(llvm::StringRef value) const {
  auto it = shapes_.find(value.str());
  if (it == shapes_.end())
    return std::nullopt;
  return it->second;
}

int64_t OnnxGraph::opset(llvm::StringRef domain) const {
  for (const auto &o : model_.opset_import()) {
    llvm::StringRef d = o.domain();
    if (d == domain || (domain.empty() && d == "ai.onnx") ||
        (domain == "ai.onnx" && d.empty()))
      return o.version();
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// Locations and diagnostics
//===----------------------------------------------------------------------===//

std::string OnnxGraph::nodeName(const onnx::NodeProto &node) const {
  if (!node.name().empty())
    return node.name();
  return node.op_type() + " #" + std::to_string(indexOf(node));
}

Location OnnxGraph::fileLoc() const {
  return FileLineColLoc::get(ctx_, path_, 0, 0);
}

Location OnnxGraph::loc(const onnx::NodeProto &node) const {
  return NameLoc::get(StringAttr::get(ctx_, nodeName(node)), fileLoc());
}

InFlightDiagnostic OnnxGraph::error(const onnx::NodeProto &node) const {
  InFlightDiagnostic d = emitError(loc(node));
  d << "ONNX node '" << nodeName(node) << "' (";
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    d << node.domain() << ".";
  d << node.op_type() << "): ";
  return d;
}

size_t OnnxGraph::indexOf(const onnx::NodeProto &node) const {
  auto it = index_.find(&node);
  return it == index_.end() ? size_t(-1) : it->second;
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

namespace {
const onnx::AttributeProto *findAttr(const onnx::NodeProto &node,
                                     llvm::StringRef name) {
  for (const auto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}
} // namespace

int64_t mlir::moe::frontend::attrInt(const onnx::NodeProto &node,
                                     llvm::StringRef name, int64_t dflt) {
  const auto *a = findAttr(node, name);
  return a && a->has_i() ? a->i() : dflt;
}

double mlir::moe::frontend::attrFloat(const onnx::NodeProto &node,
                                      llvm::StringRef name, double dflt) {
  const auto *a = findAttr(node, name);
  return a && a->has_f() ? double(a->f()) : dflt;
}

std::string mlir::moe::frontend::attrString(const onnx::NodeProto &node,
                                            llvm::StringRef name,
                                            llvm::StringRef dflt) {
  const auto *a = findAttr(node, name);
  return a && a->has_s() ? a->s() : dflt.str();
}

std::vector<int64_t> mlir::moe::frontend::attrInts(const onnx::NodeProto &node,
                                                   llvm::StringRef name) {
  const auto *a = findAttr(node, name);
  if (!a)
    return {};
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

bool mlir::moe::frontend::hasAttr(const onnx::NodeProto &node,
                                  llvm::StringRef name) {
  return findAttr(node, name) != nullptr;
}
