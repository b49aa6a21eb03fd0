//===- Region.cpp - the nodes between two values of an ONNX graph ---------===//
//
// A sublayer is the set of nodes that lie on some path from the residual
// stream value it reads to the value it adds back: forward-reachable from
// the input AND backward-reachable from the output. Constant-only subgraphs
// feeding those nodes (Constant, Shape arithmetic on initializers, weight
// Transposes torch did not fold) belong to the sublayer too, so that a
// matcher sees everything it has to account for.
//
//===----------------------------------------------------------------------===//

#include "Patterns.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

using namespace mlir;
using namespace mlir::moe::frontend;
using mlir::moe::NormKind;

mlir::moe::frontend::Region
mlir::moe::frontend::collectRegion(const OnnxGraph &g, llvm::StringRef input,
                                   llvm::StringRef output) {
  Region r;
  r.input = input.str();
  r.output = output.str();

  // Forward closure of `input`.
  std::unordered_set<const onnx::NodeProto *> forward;
  std::vector<std::string> work{input.str()};
  while (!work.empty()) {
    std::string v = std::move(work.back());
    work.pop_back();
    for (const onnx::NodeProto *c : g.consumers(v))
      if (forward.insert(c).second)
        for (const std::string &o : c->output())
          if (!o.empty())
            work.push_back(o);
  }

  // Backward from `output`, keeping only forward-reachable nodes.
  std::unordered_set<const onnx::NodeProto *> in;
  std::vector<const onnx::NodeProto *> stack;
  if (const onnx::NodeProto *p = g.producer(output))
    if (forward.count(p))
      stack.push_back(p);
  while (!stack.empty()) {
    const onnx::NodeProto *n = stack.back();
    stack.pop_back();
    if (!in.insert(n).second)
      continue;
    for (const std::string &v : n->input())
      if (const onnx::NodeProto *p = v.empty() ? nullptr : g.producer(v))
        if (forward.count(p) && !in.count(p))
          stack.push_back(p);
  }

  // Constant-only producers feeding the region, transitively.
  std::vector<const onnx::NodeProto *> pending(in.begin(), in.end());
  while (!pending.empty()) {
    const onnx::NodeProto *n = pending.back();
    pending.pop_back();
    for (const std::string &v : n->input()) {
      const onnx::NodeProto *p = v.empty() ? nullptr : g.producer(v);
      if (p && !in.count(p) && !g.readsInputs(*p)) {
        in.insert(p);
        pending.push_back(p);
      }
    }
  }

  r.nodes.assign(in.begin(), in.end());
  std::sort(r.nodes.begin(), r.nodes.end(),
            [&](const onnx::NodeProto *a, const onnx::NodeProto *b) {
              return g.indexOf(*a) < g.indexOf(*b);
            });
  if (!r.nodes.empty())
    r.anchor = r.nodes.front();
  return r;
}
