//===- Probe.cpp - inspect what the ONNX loader and norm matcher see
//-------===//
//
// A test driver for the pieces below the importer's walk, so they can be
// checked on hand-made graphs that are not whole transformers:
//
//   moe-onnx-probe model.onnx                 load; list inputs, initializers
//                                             (shape, data present) and the
//                                             shapes of node outputs
//   moe-onnx-probe model.onnx --norm V -p P   matchNorm at value V, params
//                                             named P.scale / P.bias
//   moe-onnx-probe model.onnx --region A B    collectRegion(A, B)
//   moe-onnx-probe model.onnx --values V      a constant's values
//
// Errors print as `<file>: error: <message>` (plus the node's name for node
// locations); exit 1.
//
//===----------------------------------------------------------------------===//

#include "OnnxGraph.h"
#include "Patterns.h"

#include "moe/Dialect/Moe/MoeDialect.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::frontend;

namespace {
std::string shapeStr(const std::optional<std::vector<int64_t>> &s) {
  if (!s)
    return "?";
  std::string r = "[";
  for (size_t i = 0; i < s->size(); ++i)
    r += (i ? "," : "") +
         ((*s)[i] < 0 ? std::string("?") : std::to_string((*s)[i]));
  return r + "]";
}

void printLoc(Location loc, llvm::raw_ostream &os) {
  if (auto n = dyn_cast<NameLoc>(loc)) {
    printLoc(n.getChildLoc(), os);
    os << " [node '" << n.getName().getValue() << "']";
  } else if (auto f = dyn_cast<FileLineColLoc>(loc)) {
    os << f.getFilename().getValue();
  } else {
    os << loc;
  }
}
} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    llvm::errs() << "usage: moe-onnx-probe model.onnx [--norm V -p P | "
                    "--region A B | --values V]\n";
    return 2;
  }
  MLIRContext ctx;
  ctx.loadDialect<MoeDialect>();
  ctx.getDiagEngine().registerHandler([](Diagnostic &d) {
    printLoc(d.getLocation(), llvm::errs());
    llvm::errs() << ": error: " << d << "\n";
    return success();
  });
  auto g = OnnxGraph::load(argv[1], &ctx);
  if (!g)
    return 1;
  std::string mode = argc > 2 ? argv[2] : "";
  auto &os = llvm::outs();
  if (mode.empty()) {
    os << "nodes " << g->nodes().size() << " opset " << g->opset("") << "\n";
    for (const auto &vi : g->graph().input())
      if (!g->isInitializer(vi.name()))
        os << "input " << vi.name() << " " << shapeStr(g->shape(vi.name()))
           << "\n";
    for (const auto &t : g->graph().initializer()) {
      os << "initializer " << t.name() << " " << shapeStr(g->shape(t.name()))
         << " data=" << (g->hasData(t.name()) ? "yes" : "no");
      if (t.data_location() == onnx::TensorProto::EXTERNAL)
        os << " external";
      os << "\n";
    }
    for (const onnx::NodeProto *n : g->nodes())
      for (const std::string &o : n->output())
        os << "value " << o << " " << shapeStr(g->shape(o)) << " <- "
           << g->nodeName(*n) << "\n";
    return 0;
  }
  if (mode == "--values" && argc > 3) {
    if (auto v = g->intValues(argv[3])) {
      os << "ints";
      for (int64_t x : *v)
        os << " " << x;
      os << "\n";
    } else if (auto f = g->floatValues(argv[3])) {
      os << "floats";
      for (double x : *f)
        os << " " << x;
      os << "\n";
    } else {
      os << "no values\n";
    }
    return 0;
  }
  if (mode == "--region" && argc > 4) {
    frontend::Region r = collectRegion(*g, argv[3], argv[4]);
    os << "region " << r.nodes.size() << " nodes";
    if (r.anchor)
      os << ", anchor " << g->nodeName(*r.anchor);
    os << "\n";
    for (const onnx::NodeProto *n : r.nodes)
      os << "  " << g->nodeName(*n) << " " << n->op_type() << "\n";
    return 0;
  }
  if (mode == "--norm" && argc > 3) {
    std::string prefix = argc > 5 && std::string(argv[4]) == "-p"
                             ? argv[5]
                             : std::string("norm");
    std::vector<ParamSpec> params;
    NormMatch m{NormKind::layer, 0, argv[3], {}};
    FailureOr<bool> r = matchNorm(*g, argv[3], prefix, params, m);
    if (failed(r))
      return 1;
    if (!*r) {
      os << "no norm\n";
      return 0;
    }
    os << "norm " << stringifyNormKind(m.kind) << " eps " << m.epsilon
       << " output " << m.output << " nodes " << m.nodes.size() << "\n";
    for (const ParamSpec &p : params) {
      os << "param " << p.name << " " << shapeStr(p.shape) << " <-";
      for (const std::string &i : p.source.initializers)
        os << " " << i;
      os << (p.source.transpose ? " transposed" : "") << "\n";
    }
    return 0;
  }
  llvm::errs() << "moe-onnx-probe: bad arguments\n";
  return 2;
}
