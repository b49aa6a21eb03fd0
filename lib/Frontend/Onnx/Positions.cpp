//===- Positions.cpp - learned absolute position embeddings ---------------===//
//
// GPT-2 / BERT add a learned table row per position to the token
// embeddings: `x = wte(tokens) + wpe(arange(N))[None]`. torch.onnx.export
// writes an Add of the embedding Gather's output and a Gather of the
// position table by statically known ids (Shape / Gather / Range, or a
// constant), behind views (Unsqueeze, Reshape, Expand).
//
// What the ids and views compute is decided by value, not by the nodes'
// shape: the position side is evaluated with the table replaced by a probe
// whose entry (r, j) is r·M + j. The Add represents moe.position_embedding
// exactly when the probe's value, broadcast to B x N x M, is n·M + j at
// (b, n, j): row n of the table, unpermuted, for every sample. Anything
// else (offset or reversed ids, ids from a graph input) is refused by name.
//
//===----------------------------------------------------------------------===//

#include "ContribUtil.h"
#include "Patterns.h"

#include <map>

using namespace mlir;
using namespace mlir::moe::frontend;
using contrib::isOp;

namespace {

/// Ops that move the gathered rows around without computing.
bool isPositionView(const onnx::NodeProto &n) {
  return isOp(n, "Unsqueeze") || isOp(n, "Reshape") || isOp(n, "Expand") ||
         isOp(n, "Identity") || isNoOpCast(n);
}

/// Whether `t`, broadcast (NumPy rules) to batch x seq x m, holds n·m + j
/// at every (b, n, j).
bool isRowPerPosition(const StaticTensor &t, int64_t batch, int64_t seq,
                      int64_t m) {
  const int64_t full[3] = {batch, seq, m};
  if (t.shape.size() > 3)
    return false;
  // t's shape right-aligned against B x N x M; 1 broadcasts.
  std::vector<int64_t> shape(3 - t.shape.size(), 1);
  shape.insert(shape.end(), t.shape.begin(), t.shape.end());
  for (int d = 0; d < 3; ++d)
    if (shape[d] != 1 && shape[d] != full[d])
      return false;
  std::vector<int64_t> stride(3, 0);
  for (int d = 2, s = 1; d >= 0; --d) {
    stride[d] = shape[d] == 1 ? 0 : s;
    s *= static_cast<int>(shape[d]);
  }
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t n = 0; n < seq; ++n)
      for (int64_t j = 0; j < m; ++j) {
        double v = t.data[b * stride[0] + n * stride[1] + j * stride[2]];
        if (v != static_cast<double>(n * m + j))
          return false;
      }
  return true;
}

} // namespace

FailureOr<bool> mlir::moe::frontend::matchPositions(
    const OnnxGraph &g, StaticEval &eval, llvm::StringRef stream,
    int64_t batch, int64_t seq, int64_t m, PositionMatch &out) {
  auto cs = g.consumers(stream);
  if (cs.size() != 1 || !isOp(*cs.front(), "Add") ||
      cs.front()->input_size() != 2)
    return false;
  const onnx::NodeProto *add = cs.front();
  std::string other =
      add->input(0) == stream ? add->input(1) : add->input(0);
  if (other == stream)
    return false;

  // Back through the views to a Gather of a 2-D initializer.
  std::vector<const onnx::NodeProto *> nodes{add};
  const onnx::NodeProto *p = g.producer(other);
  while (p && isPositionView(*p) && p->input_size() >= 1) {
    nodes.push_back(p);
    p = g.producer(p->input(0));
  }
  if (!p || !isOp(*p, "Gather") || p->input_size() != 2 ||
      !g.isInitializer(p->input(0)))
    return false;
  const std::string &table = p->input(0);
  auto ts = g.shape(table);
  if (!ts || ts->size() != 2 || (*ts)[1] != m)
    return false;
  nodes.push_back(p);
  if (attrInt(*p, "axis", 0) != 0) {
    g.error(*p) << "position embedding Gather along axis "
                << attrInt(*p, "axis", 0) << "; expected axis 0 (a row per "
                << "position)";
    return failure();
  }
  if (!eval.known(p->input(1))) {
    g.error(*p) << "position ids '" << p->input(1)
                << "' are computed from a graph input; learned positions "
                   "are supported at the token's index 0..N-1 only "
                   "(moe.position_embedding)";
    return failure();
  }

  int64_t rows = (*ts)[0];
  StaticTensor probe;
  probe.shape = {rows, m};
  probe.data.resize(rows * m);
  for (int64_t i = 0; i < rows * m; ++i)
    probe.data[i] = static_cast<double>(i);
  std::optional<StaticTensor> v = eval.probe({{table, probe}}, other);
  if (!v || v->shapeOnly || !isRowPerPosition(*v, batch, seq, m)) {
    g.error(*p) << "position embedding '" << table
                << "' is not added at positions 0..N-1 of every sample "
                   "(row n of the table to token n): moe.position_embedding "
                   "cannot represent it";
    return failure();
  }
  out.table = table;
  out.rows = rows;
  out.output = add->output(0);
  out.nodes = std::move(nodes);
  return true;
}
