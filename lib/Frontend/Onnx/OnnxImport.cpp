//===- OnnxImport.cpp - walk an ONNX transformer's residual stream --------===//
//
// importOnnxFile loads the model (OnnxGraph), then walks it the way a
// transformer is built:
//
//   tokens -> Gather(embedding table)                      the stream S
//   repeat: S -> [attention sublayer] -> Add(S, .) = S'
//           S' -> [FFN sublayer]      -> Add(S', .) = S''  one block
//   S -> [final norm] -> MatMul/Gemm(LM head) -> logits [-> loss(labels)]
//
// A sublayer is the Region between the stream value and the value its
// residual Add adds back; the matchers in Patterns.h classify it. Every
// node that computes something from the inputs must be claimed by one of
// these steps; the first that is not is reported ("unsupported ONNX node").
// All errors are diagnostics at the ONNX node's location and the result is
// null: nothing partial is built.
//
//===----------------------------------------------------------------------===//

#include "moe/Frontend/OnnxImport.h"

#include "OnnxGraph.h"
#include "Patterns.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Path.h"

#include <unordered_set>

using namespace mlir;
using namespace mlir::moe::frontend;
using mlir::moe::NormKind;

namespace {

bool isOp(const onnx::NodeProto &n, llvm::StringRef op) {
  return n.op_type() == op && (n.domain().empty() || n.domain() == "ai.onnx");
}

/// Ops that only rearrange or relabel values (between the LM head and the
/// loss, or on the labels' way to the loss).
bool isView(const onnx::NodeProto &n) {
  static const llvm::StringSet<> views = {"Reshape",  "Flatten",  "Transpose",
                                          "Cast",     "Identity", "Squeeze",
                                          "Unsqueeze"};
  return (n.domain().empty() || n.domain() == "ai.onnx") &&
         views.contains(n.op_type());
}

/// Op types that appear in some supported sublayer pattern. When no matcher
/// claims a region, the first node of another type is the likely culprit.
bool knownSublayerOp(const onnx::NodeProto &n) {
  static const llvm::StringSet<> known = {"Add",
                                          "Sub",
                                          "Mul",
                                          "Div",
                                          "Pow",
                                          "Sqrt",
                                          "Reciprocal",
                                          "Neg",
                                          "Exp",
                                          "Log",
                                          "Erf",
                                          "Tanh",
                                          "Sigmoid",
                                          "Relu",
                                          "Gelu",
                                          "FastGelu",
                                          "BiasGelu",
                                          "Softmax",
                                          "MatMul",
                                          "Gemm",
                                          "Einsum",
                                          "Transpose",
                                          "Reshape",
                                          "Flatten",
                                          "Squeeze",
                                          "Unsqueeze",
                                          "Concat",
                                          "Split",
                                          "Slice",
                                          "Gather",
                                          "GatherElements",
                                          "GatherND",
                                          "ScatterND",
                                          "ScatterElements",
                                          "Shape",
                                          "Size",
                                          "Expand",
                                          "Tile",
                                          "Range",
                                          "Constant",
                                          "ConstantOfShape",
                                          "Cast",
                                          "CastLike",
                                          "Identity",
                                          "Where",
                                          "Equal",
                                          "Less",
                                          "Greater",
                                          "Not",
                                          "And",
                                          "Or",
                                          "Trilu",
                                          "ReduceMean",
                                          "ReduceSum",
                                          "ReduceMax",
                                          "Max",
                                          "Min",
                                          "TopK",
                                          "ArgMax",
                                          "OneHot",
                                          "NonZero",
                                          "CumSum",
                                          "Clip",
                                          "Sin",
                                          "Cos",
                                          "Dropout",
                                          "LayerNormalization",
                                          "RMSNormalization",
                                          "SimplifiedLayerNormalization",
                                          "Attention",
                                          "MultiHeadAttention",
                                          "GroupQueryAttention",
                                          "RotaryEmbedding",
                                          "MoE",
                                          "QMoE",
                                          "Floor",
                                          "Ceil",
                                          "Mod",
                                          "Abs",
                                          "ReduceL2",
                                          "IsNaN",
                                          "Softplus"};
  return known.contains(n.op_type());
}

class Importer {
public:
  Importer(const OnnxGraph &g, const ImportOptions &opts)
      : g(g), opts(opts), spec() {}

  OwningOpRef<ModuleOp> run();

private:
  const OnnxGraph &g;
  const ImportOptions &opts;
  ModelSpec spec;
  std::unordered_set<const onnx::NodeProto *> claimed;
  const onnx::NodeProto *embedding = nullptr;
  std::string tableName;

  LogicalResult findEmbedding(std::string &stream);
  const onnx::NodeProto *residualAdd(const std::string &stream) const;
  LogicalResult sublayer(const std::string &stream, const onnx::NodeProto &add,
                         BlockSpec &block, int index, bool attention);
  LogicalResult head(const std::string &stream, int blocks);
  LogicalResult loss(const std::string &logits);
  LogicalResult everythingClaimed();
  InFlightDiagnostic unsupported(const onnx::NodeProto &n) const;

  void claim(const onnx::NodeProto *n) { claimed.insert(n); }
  std::string otherOperand(const onnx::NodeProto &add,
                           const std::string &v) const {
    return add.input(0) == v ? add.input(1) : add.input(0);
  }
  WeightSource source(llvm::StringRef init, bool transpose = false) const {
    WeightSource s;
    s.initializers = {init.str()};
    s.transpose = transpose;
    s.file = g.path().str();
    return s;
  }
};

InFlightDiagnostic Importer::unsupported(const onnx::NodeProto &n) const {
  InFlightDiagnostic d = emitError(g.loc(n));
  d << "unsupported ONNX node '" << g.nodeName(n) << "' (";
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    d << n.domain() << ".";
  d << n.op_type() << ")";
  return d;
}

/// The token input is the integer graph input read by a Gather on a
/// constant table (the embedding). B and N come from its shape.
LogicalResult Importer::findEmbedding(std::string &stream) {
  const onnx::ValueInfoProto *tokens = nullptr;
  for (const auto &vi : g.graph().input()) {
    if (g.constant(vi.name()))
      continue; // old exporters list initializers as inputs too
    int32_t et = vi.type().tensor_type().elem_type();
    if (et != onnx::TensorProto::INT64 && et != onnx::TensorProto::INT32)
      continue;
    for (const onnx::NodeProto *c : g.consumers(vi.name())) {
      if (!isOp(*c, "Gather") || c->input_size() != 2 ||
          c->input(1) != vi.name() || !g.constant(c->input(0)))
        continue;
      auto ts = g.shape(c->input(0));
      if (!ts || ts->size() != 2) {
        g.error(*c) << "embedding table '" << c->input(0) << "' has rank "
                    << (ts ? ts->size() : 0)
                    << "; expected 2 (vocab x embedding size)";
        return failure();
      }
      if (attrInt(*c, "axis", 0) != 0) {
        g.error(*c) << "embedding Gather along axis " << attrInt(*c, "axis", 0)
                    << "; expected axis 0";
        return failure();
      }
      if (!g.isInitializer(c->input(0))) {
        g.error(*c) << "embedding table '" << c->input(0)
                    << "' is a Constant node, not an initializer";
        return failure();
      }
      tokens = &vi;
      embedding = c;
      break;
    }
    if (tokens)
      break;
  }
  if (!tokens) {
    emitError(g.fileLoc())
        << "no token input: expected an int64/int32 graph input feeding a "
           "Gather on a 2-D embedding initializer (vocab x embedding size)";
    return failure();
  }
  tableName = embedding->input(0);
  std::vector<int64_t> table = *g.shape(tableName);
  if (table[0] <= 0 || table[1] <= 0) {
    g.error(*embedding) << "embedding table '" << tableName << "' is "
                        << table[0] << " x " << table[1]
                        << "; both sizes must be positive";
    return failure();
  }
  spec.vocab = table[0];
  spec.embed = table[1];
  spec.embeddingLoc = g.loc(*embedding);
  spec.params.push_back({"embed.table", table, source(tableName)});
  claim(embedding);

  auto ts = g.shape(tokens->name());
  if (!ts || ts->size() != 2) {
    g.error(*embedding) << "token input '" << tokens->name()
                        << "' must have shape [batch, seq]; it has "
                        << (ts ? "rank " + std::to_string(ts->size())
                               : std::string("no declared shape"));
    return failure();
  }
  auto dim = [&](int64_t declared, std::optional<int64_t> opt,
                 llvm::StringRef what, llvm::StringRef flag) -> int64_t {
    if (opt)
      return *opt;
    if (declared > 0)
      return declared;
    g.error(*embedding) << "token input '" << tokens->name()
                        << "' has a dynamic " << what << " dimension; pass "
                        << flag << "=<n>";
    return 0;
  };
  spec.batch = dim((*ts)[0], opts.batch, "batch", "--onnx-batch");
  if (!spec.batch)
    return failure();
  spec.seq = dim((*ts)[1], opts.seq, "sequence", "--onnx-seq");
  if (!spec.seq)
    return failure();
  if (spec.batch < 0 || spec.seq < 0) {
    g.error(*embedding) << "batch and sequence length must be positive";
    return failure();
  }
  stream = embedding->output(0);
  return success();
}

/// The Add that puts a sublayer's result back into the stream: it reads
/// the stream value directly and a value computed from it.
const onnx::NodeProto *Importer::residualAdd(const std::string &stream) const {
  std::unordered_set<std::string> reach;
  std::vector<std::string> work{stream};
  while (!work.empty()) {
    std::string v = std::move(work.back());
    work.pop_back();
    for (const onnx::NodeProto *c : g.consumers(v))
      for (const std::string &o : c->output())
        if (!o.empty() && reach.insert(o).second)
          work.push_back(o);
  }
  for (const onnx::NodeProto *c : g.consumers(stream)) {
    if (!isOp(*c, "Add") || c->input_size() != 2 || c->output_size() < 1)
      continue;
    const std::string &a = c->input(0), &b = c->input(1);
    if (a == b)
      continue;
    if ((a == stream && reach.count(b)) || (b == stream && reach.count(a)))
      return c;
  }
  return nullptr;
}

/// Classifies one sublayer with the matchers, in order; the first that
/// recognises it claims all its nodes.
LogicalResult Importer::sublayer(const std::string &stream,
                                 const onnx::NodeProto &add, BlockSpec &block,
                                 int index, bool attention) {
  moe::frontend::Region r = collectRegion(g, stream, otherOperand(add, stream));
  if (!r.anchor)
    r.anchor = &add;
  using Matcher = FailureOr<bool> (*)(
      const OnnxGraph &, const moe::frontend::Region &, MatchTarget &);
  static const Matcher attn[] = {matchContribAttention, matchTorchAttention};
  static const Matcher ffn[] = {matchContribMoe, matchTorchMoe, matchDenseFfn};
  llvm::ArrayRef<Matcher> matchers(attention ? llvm::ArrayRef<Matcher>(attn)
                                             : llvm::ArrayRef<Matcher>(ffn));
  MatchTarget t{block, index, spec.params};
  for (Matcher m : matchers) {
    size_t mark = spec.params.size();
    FailureOr<bool> ok = m(g, r, t);
    if (failed(ok))
      return failure();
    if (!*ok) {
      spec.params.resize(mark); // "not mine" adds nothing; make sure
      continue;
    }
    for (const onnx::NodeProto *n : r.nodes)
      claim(n);
    claim(&add);
    return success();
  }
  // Nobody recognised it: point at the first node no pattern uses, else at
  // the start of the region.
  const onnx::NodeProto *culprit = r.anchor;
  for (const onnx::NodeProto *n : r.nodes)
    if (!knownSublayerOp(*n)) {
      culprit = n;
      break;
    }
  unsupported(*culprit) << " in block " << index << "'s "
                        << (attention ? "attention" : "ffn")
                        << " sublayer: no pattern matches (the sublayer has "
                        << r.nodes.size() << " nodes, from '"
                        << g.nodeName(*r.anchor) << "' to the residual Add '"
                        << g.nodeName(add) << "')";
  return failure();
}

/// Final norm, LM head and loss after the last block.
LogicalResult Importer::head(const std::string &stream, int blocks) {
  NormMatch nm{NormKind::layer, 1e-5, stream, {}};
  FailureOr<bool> norm = matchNorm(g, stream, "final_norm", spec.params, nm);
  if (failed(norm))
    return failure();
  std::string cur = stream;
  if (*norm) {
    spec.finalNorm = nm.kind;
    spec.finalEpsilon = nm.epsilon;
    for (const onnx::NodeProto *n : nm.nodes)
      claim(n);
    cur = nm.output;
  } else {
    spec.finalNorm = std::nullopt;
  }

  const onnx::NodeProto *lm = nullptr;
  for (const onnx::NodeProto *c : g.consumers(cur))
    if ((isOp(*c, "MatMul") || isOp(*c, "Gemm")) && c->input_size() >= 2 &&
        c->input(0) == cur) {
      lm = c;
      break;
    }
  if (!lm) {
    auto cs = g.consumers(cur);
    if (cs.empty()) {
      emitError(g.fileLoc()) << "the model ends after block " << blocks - 1
                             << " without an LM head (MatMul/Gemm by an "
                                "embedding x vocab initializer)";
    } else {
      unsupported(*cs.front())
          << " after block " << blocks - 1
          << ": expected a block's residual Add, the final norm or the LM "
             "head (MatMul/Gemm by an embedding x vocab initializer)";
    }
    return failure();
  }

  // The weight: an initializer (M x V; V x M with Gemm transB or behind a
  // Transpose), possibly the embedding table itself (tied).
  std::string w = lm->input(1);
  bool transposed = isOp(*lm, "Gemm") && attrInt(*lm, "transB", 0) == 1;
  if (isOp(*lm, "Gemm") && attrInt(*lm, "transA", 0) != 0) {
    g.error(*lm) << "LM head Gemm with transA is not supported";
    return failure();
  }
  const onnx::NodeProto *tr = g.producer(w);
  if (tr && isOp(*tr, "Transpose") && g.isInitializer(tr->input(0))) {
    std::vector<int64_t> perm = attrInts(*tr, "perm");
    if (!perm.empty() && perm != std::vector<int64_t>{1, 0}) {
      g.error(*tr) << "LM head weight transposed with an unexpected perm";
      return failure();
    }
    transposed = !transposed;
    w = tr->input(0);
    claim(tr);
  }
  if (!g.isInitializer(w)) {
    g.error(*lm) << "LM head weight '" << w
                 << "' is computed, not an initializer";
    return failure();
  }
  auto ws = g.shape(w);
  if (!ws || ws->size() != 2) {
    g.error(*lm) << "LM head weight '" << w << "' must be 2-D";
    return failure();
  }
  int64_t rows = (*ws)[0], cols = (*ws)[1];
  int64_t m = transposed ? cols : rows, v = transposed ? rows : cols;
  if (m != spec.embed || v != spec.vocab) {
    g.error(*lm) << "LM head weight '" << w << "' is " << rows << " x " << cols
                 << (transposed ? " (transposed)" : "")
                 << "; expected embedding x vocab = " << spec.embed << " x "
                 << spec.vocab;
    return failure();
  }
  if (isOp(*lm, "Gemm") && lm->input_size() > 2 && !lm->input(2).empty()) {
    g.error(*lm) << "an LM head bias is not supported";
    return failure();
  }
  if (w == tableName && transposed) {
    spec.tiedEmbeddings = true;
  } else {
    spec.params.push_back(
        {"lm_head.weight", {spec.embed, spec.vocab}, source(w, transposed)});
  }
  spec.headLoc = g.loc(*lm);
  claim(lm);
  return loss(lm->output(0));
}

/// Either the logits are a graph output (the builder adds the loss, labels
/// become an input) or a cross-entropy loss reads them and a labels input.
LogicalResult Importer::loss(const std::string &logitsIn) {
  std::string logits = logitsIn;
  for (;;) {
    for (const auto &o : g.graph().output())
      if (o.name() == logits)
        return success();
    // Shape / Size only read the logits' shape (torch's view(-1, V) can
    // export that way); they are part of the loss plumbing.
    std::vector<const onnx::NodeProto *> cs;
    for (const onnx::NodeProto *c : g.consumers(logits)) {
      if (isOp(*c, "Shape") || isOp(*c, "Size"))
        claim(c);
      else
        cs.push_back(c);
    }
    if (cs.empty()) {
      emitError(g.fileLoc()) << "the LM head's result '" << logitsIn
                             << "' reaches neither a graph output nor a loss";
      return failure();
    }
    const onnx::NodeProto *c = cs.front();
    if (isOp(*c, "Add") && cs.size() == 1) {
      g.error(*c) << "an LM head bias is not supported";
      return failure();
    }
    if (isView(*c) && c->input(0) == logits && cs.size() == 1) {
      claim(c);
      logits = c->output(0);
      continue;
    }
    const onnx::NodeProto *lossNode = nullptr;
    if (isOp(*c, "SoftmaxCrossEntropyLoss") && c->input(0) == logits) {
      lossNode = c;
    } else if (isOp(*c, "LogSoftmax") && c->input(0) == logits) {
      for (const onnx::NodeProto *n : g.consumers(c->output(0)))
        if (isOp(*n, "NegativeLogLikelihoodLoss") &&
            n->input(0) == c->output(0))
          lossNode = n;
      if (!lossNode) {
        unsupported(*c) << " after the LM head: LogSoftmax is not followed "
                           "by NegativeLogLikelihoodLoss";
        return failure();
      }
      claim(c);
    } else {
      unsupported(*c) << " after the LM head: expected the logits as a graph "
                         "output, SoftmaxCrossEntropyLoss, or LogSoftmax + "
                         "NegativeLogLikelihoodLoss";
      return failure();
    }
    std::string red = attrString(*lossNode, "reduction", "mean");
    if (red != "mean") {
      g.error(*lossNode) << "loss reduction '" << red
                         << "' is not supported; the step's loss is the mean";
      return failure();
    }
    if (lossNode->input_size() > 2 && !lossNode->input(2).empty()) {
      g.error(*lossNode) << "class weights are not supported";
      return failure();
    }
    // Labels: an integer graph input, possibly reshaped on the way.
    std::string labels = lossNode->input_size() > 1 ? lossNode->input(1) : "";
    while (const onnx::NodeProto *p = g.producer(labels)) {
      if (!isView(*p))
        break;
      claim(p);
      labels = p->input(0);
    }
    bool isInput = false;
    for (const auto &vi : g.graph().input())
      if (vi.name() == labels && !g.constant(labels))
        isInput = true;
    if (!isInput) {
      g.error(*lossNode) << "the labels '" << labels
                         << "' must be a graph input";
      return failure();
    }
    claim(lossNode);
    return success();
  }
}

/// Every node whose result reaches a graph output and depends on an input
/// must be part of something recognised.
LogicalResult Importer::everythingClaimed() {
  std::unordered_set<const onnx::NodeProto *> live;
  std::vector<const onnx::NodeProto *> work;
  for (const auto &o : g.graph().output())
    if (const onnx::NodeProto *p = g.producer(o.name()))
      work.push_back(p);
  while (!work.empty()) {
    const onnx::NodeProto *n = work.back();
    work.pop_back();
    if (!live.insert(n).second)
      continue;
    for (const std::string &in : n->input())
      if (const onnx::NodeProto *p = in.empty() ? nullptr : g.producer(in))
        work.push_back(p);
  }
  // Nodes that read no graph input (constant folding leftovers) are inert.
  for (const onnx::NodeProto *n : g.nodes()) {
    if (claimed.count(n) || !live.count(n) || !g.readsInputs(*n))
      continue;
    unsupported(*n) << " outside the recognised embedding, blocks, final "
                       "norm, LM head and loss";
    return failure();
  }
  return success();
}

OwningOpRef<ModuleOp> Importer::run() {
  std::string stream;
  if (failed(findEmbedding(stream)))
    return nullptr;

  int index = 0;
  while (const onnx::NodeProto *add1 = residualAdd(stream)) {
    BlockSpec block(g.loc(*add1));
    if (failed(sublayer(stream, *add1, block, index, /*attention=*/true)))
      return nullptr;
    std::string mid = add1->output(0);
    const onnx::NodeProto *add2 = residualAdd(mid);
    if (!add2) {
      g.error(*add1) << "block " << index
                     << "'s attention sublayer ends here, but no FFN "
                        "sublayer (another residual Add) follows it";
      return nullptr;
    }
    if (failed(sublayer(mid, *add2, block, index, /*attention=*/false)))
      return nullptr;
    if (block.moe && !block.moe->capacityFactor && opts.capacityFactor)
      block.moe->capacityFactor = opts.capacityFactor;
    spec.blocks.push_back(std::move(block));
    stream = add2->output(0);
    ++index;
  }
  if (index == 0) {
    auto cs = g.consumers(stream);
    if (cs.empty())
      g.error(*embedding) << "no transformer block follows the embedding";
    else
      unsupported(*cs.front())
          << " after the embedding: expected the first block (a sublayer "
             "whose result is added back to the embedding output)";
    return nullptr;
  }
  if (failed(head(stream, index)) || failed(everythingClaimed()))
    return nullptr;

  // Name, provenance and grid.
  const onnx::ModelProto &mp = g.model();
  llvm::StringRef file = llvm::sys::path::filename(g.path());
  spec.name = !mp.graph().name().empty()
                  ? mp.graph().name()
                  : llvm::sys::path::stem(g.path()).str();
  spec.origin = file.str() + " (";
  if (!mp.producer_name().empty()) {
    spec.origin += mp.producer_name();
    if (!mp.producer_version().empty())
      spec.origin += " " + mp.producer_version();
    spec.origin += ", ";
  }
  spec.origin += "opset " + std::to_string(g.opset("")) + ")";
  spec.nodes = opts.nodes;
  spec.gpusPerNode = opts.gpusPerNode;
  return buildModule(spec, g.context());
}

OwningOpRef<ModuleOp> importGraph(const OnnxGraph &g,
                                  const ImportOptions &options) {
  if (options.nodes < 1 || options.gpusPerNode < 1) {
    emitError(g.fileLoc()) << "the device grid must be at least 1 x 1";
    return nullptr;
  }
  Importer imp(g, options);
  return imp.run();
}

} // namespace

OwningOpRef<ModuleOp> mlir::moe::frontend::importOnnxFile(
    llvm::StringRef path, const ImportOptions &options, MLIRContext *ctx) {
  std::unique_ptr<OnnxGraph> g = OnnxGraph::load(path, ctx);
  if (!g)
    return nullptr;
  return importGraph(*g, options);
}

OwningOpRef<ModuleOp> mlir::moe::frontend::importOnnxBuffer(
    llvm::StringRef bytes, llvm::StringRef name, const ImportOptions &options,
    MLIRContext *ctx) {
  std::unique_ptr<OnnxGraph> g = OnnxGraph::parse(bytes, name, ctx);
  if (!g)
    return nullptr;
  return importGraph(*g, options);
}
