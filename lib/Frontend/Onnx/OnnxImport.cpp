//===- OnnxImport.cpp - walk an ONNX transformer's residual stream --------===//
//
// importOnnxFile loads the model (OnnxGraph), then walks it the way a
// transformer is built:
//
//   tokens -> Gather(embedding table)                      the stream S
//          [-> Add(S, Gather(position table))]            learned positions
//   repeat: S -> [attention sublayer] -> Add(S, .) = S'  [-> norm: post-norm]
//           S' -> [FFN sublayer]      -> Add(S', .) = S''[-> norm] one block
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
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/Path.h"

#include <unordered_map>
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

/// The op a node became: its block (-1: model-level) and site.
struct Site {
  int64_t block;
  OpSite site;
};

class Importer {
public:
  Importer(const OnnxGraph &g, const ImportOptions &opts)
      : g(g), opts(opts), spec(), eval(g) {}

  OwningOpRef<ModuleOp> run();

private:
  const OnnxGraph &g;
  const ImportOptions &opts;
  ModelSpec spec;
  StaticEval eval;
  /// Nodes the recognised parts compute, and the op each becomes (several
  /// for a fused node such as com.microsoft.MoE).
  std::unordered_map<const onnx::NodeProto *, std::vector<Site>> claimed;
  /// Statically known nodes attributed to the op that reads them.
  std::unordered_map<const onnx::NodeProto *, Site> plumbing;
  int64_t currentBlock = -1;
  const onnx::NodeProto *embedding = nullptr;
  std::string tableName;

  LogicalResult findEmbedding(std::string &stream);
  LogicalResult findPositions(std::string &stream);
  /// A post-norm after a residual Add (BERT): if `stream` is normalised
  /// (`required`: it must be), claims the norm for `site` of block `index`
  /// and moves the stream past it. Returns whether one was found.
  FailureOr<bool> postNorm(std::string &stream, BlockSpec &block, int index,
                           OpSite site, bool required);
  const onnx::NodeProto *residualAdd(const std::string &stream) const;
  LogicalResult sublayer(const std::string &stream, const onnx::NodeProto &add,
                         BlockSpec &block, int index, bool attention);
  /// HF's RMSNorm upcasts the stream (`hidden_states.to(float32)`) and
  /// torch.onnx.export then reads the residual from the Cast: when the
  /// stream's only reader is a no-op Cast, the stream continues after it
  /// and the Cast is a no-op of the op that produced the stream.
  void passNoOpCast(std::string &stream, Site producer) {
    auto cs = g.consumers(stream);
    if (cs.size() != 1 || !isNoOpCast(*cs.front()))
      return;
    claimed[cs.front()].push_back(producer);
    stream = cs.front()->output(0);
  }
  LogicalResult accountFor(const moe::frontend::Region &r,
                           const Claims &claims, const onnx::NodeProto &add,
                           int index, bool attention);
  LogicalResult head(const std::string &stream, int blocks);
  LogicalResult loss(const std::string &logits);
  LogicalResult everythingClaimed();
  void attributePlumbing();
  void recordOrigins();
  LogicalResult checkOrigins(ModuleOp module) const;
  void report(llvm::raw_ostream &os) const;
  InFlightDiagnostic unsupported(const onnx::NodeProto &n) const;

  /// Model-level claims (embedding, final norm, head, loss).
  void claim(const onnx::NodeProto *n, OpSite site) {
    claimed[n].push_back(Site{-1, site});
  }
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

/// Gathers on an initializer that read an integer graph input, directly
/// or through views (Reshape, Flatten, ...).
std::vector<const onnx::NodeProto *> tableGathers(const OnnxGraph &g) {
  std::vector<const onnx::NodeProto *> out;
  for (const auto &vi : g.graph().input()) {
    int32_t et = vi.type().tensor_type().elem_type();
    if (g.constant(vi.name()) || (et != onnx::TensorProto::INT64 &&
                                  et != onnx::TensorProto::INT32))
      continue;
    std::vector<std::string> values{vi.name()};
    for (size_t i = 0; i < values.size() && i < 16; ++i)
      for (const onnx::NodeProto *c : g.consumers(values[i])) {
        if (isOp(*c, "Gather") && c->input_size() == 2 &&
            c->input(1) == values[i] && g.isInitializer(c->input(0)))
          out.push_back(c);
        else if (isView(*c))
          values.push_back(c->output(0));
      }
  }
  return out;
}

/// Two embedding lookups of token inputs are an encoder and a decoder
/// (T5 / SwitchTransformers, NLLB-MoE): refused, naming both.
LogicalResult refuseEncoderDecoder(const OnnxGraph &g) {
  auto gathers = tableGathers(g);
  if (gathers.size() < 2)
    return success();
  g.error(*gathers[1]) << "embeds token inputs a second time (the first: '"
                       << g.nodeName(*gathers[0])
                       << "'): an encoder-decoder model (NLLB-MoE, "
                          "SwitchTransformers); the importer takes one "
                          "decoder-only or encoder-only stack";
  return failure();
}

/// The token input is the integer graph input read by a Gather on a
/// constant table (the embedding). B and N come from its shape.
LogicalResult Importer::findEmbedding(std::string &stream) {
  if (failed(refuseEncoderDecoder(g)))
    return failure();
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
  claim(embedding, OpSite::embedding);

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

/// GPT-2's learned positions right after the token embedding.
LogicalResult Importer::findPositions(std::string &stream) {
  PositionMatch pm;
  FailureOr<bool> found = matchPositions(g, eval, stream, spec.batch,
                                         spec.seq, spec.embed, pm);
  if (failed(found))
    return failure();
  if (!*found)
    return success();
  spec.positions = pm.rows;
  spec.params.push_back(
      {"embed.positions", {pm.rows, spec.embed}, source(pm.table)});
  for (const onnx::NodeProto *n : pm.nodes)
    claim(n, OpSite::positions);
  stream = pm.output;
  passNoOpCast(stream, Site{-1, OpSite::positions});
  return success();
}

FailureOr<bool> Importer::postNorm(std::string &stream, BlockSpec &block,
                                   int index, OpSite site, bool required) {
  bool attn = site == OpSite::attnPostNorm;
  std::string prefix = "block" + std::to_string(index) +
                       (attn ? ".attn_postnorm" : ".ffn_postnorm");
  NormMatch nm{NormKind::layer, 1e-5, stream, {}};
  FailureOr<bool> norm = matchNorm(g, stream, prefix, spec.params, nm);
  if (failed(norm))
    return failure();
  if (!*norm) {
    if (required)
      emitError(block.attention.loc)
          << "block " << index << " normalises its attention residual "
          << "(post-norm) but not its FFN residual: a post-norm block "
             "normalises both";
    return required ? FailureOr<bool>(failure()) : FailureOr<bool>(false);
  }
  if (!attn && (nm.kind != *block.postnorm ||
                nm.epsilon != block.postEpsilon)) {
    g.error(*nm.nodes.front())
        << "block " << index << "'s two post-norms differ in kind or "
        << "epsilon; moe blocks give both sublayers the same post-norm";
    return failure();
  }
  block.postnorm = nm.kind;
  block.postEpsilon = nm.epsilon;
  for (const onnx::NodeProto *n : nm.nodes)
    claimed[n].push_back(Site{index, site});
  stream = nm.output;
  passNoOpCast(stream, Site{index, site});
  return true;
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
  for (Matcher m : matchers) {
    size_t mark = spec.params.size();
    Claims claims;
    MatchTarget t{block, index, spec.params, claims, eval};
    FailureOr<bool> ok = m(g, r, t);
    if (failed(ok))
      return failure();
    if (!*ok) {
      spec.params.resize(mark); // "not mine" adds nothing; make sure
      continue;
    }
    return accountFor(r, claims, add, index, attention);
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

/// Every node of a recognised sublayer is either claimed by the matcher
/// (it computes part of the op the matcher built) or statically known (shape
/// plumbing, constants, masks, tables: attributed to the op that reads it).
/// Anything else would silently vanish from the model: an error at it.
LogicalResult Importer::accountFor(const moe::frontend::Region &r,
                                   const Claims &claims,
                                   const onnx::NodeProto &add, int index,
                                   bool attention) {
  std::unordered_map<const onnx::NodeProto *, std::vector<OpSite>> mine;
  for (auto [n, site] : claims.nodes)
    if (!llvm::is_contained(mine[n], site))
      mine[n].push_back(site);
  for (const onnx::NodeProto *n : r.nodes) {
    if (mine.count(n) || eval.knownNode(*n))
      continue;
    unsupported(*n) << " in block " << index << "'s "
                    << (attention ? "attention" : "FFN")
                    << " sublayer is not part of the recognised pattern ("
                    << (attention ? "pre-norm, Q/K/V/O projections, head "
                                    "reshapes, rotary, scale, causal mask, "
                                    "softmax, P·V"
                                  : "pre-norm, router, top-k, expert "
                                    "dispatch, expert FFNs, weighted "
                                    "combine, shared experts")
                    << "); importing the sublayer without it would compute "
                       "a different function";
    return failure();
  }
  for (auto &[n, sites] : mine) {
    if (claimed.count(n)) {
      g.error(*n) << "internal: node claimed by two sublayers";
      return failure();
    }
    for (OpSite site : sites)
      claimed[n].push_back(Site{index, site});
  }
  claimed[&add].push_back(
      Site{index, attention ? OpSite::attnResidual : OpSite::ffnResidual});
  return success();
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
      claim(n, OpSite::finalNorm);
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
    claim(tr, OpSite::lmHead);
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
  claim(lm, OpSite::lmHead);
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
        claim(c, OpSite::loss);
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
      claim(c, OpSite::loss);
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
      claim(c, OpSite::loss);
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
      claim(p, OpSite::loss);
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
    claim(lossNode, OpSite::loss);
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
  // Statically known nodes (constant folding leftovers, shape plumbing)
  // count for the op that reads them (attributePlumbing).
  for (const onnx::NodeProto *n : g.nodes()) {
    if (claimed.count(n) || !live.count(n) || !g.readsInputs(*n) ||
        eval.knownNode(*n))
      continue;
    unsupported(*n) << " outside the recognised embedding, blocks, final "
                       "norm, LM head and loss";
    return failure();
  }
  return success();
}

/// Attributes each statically known, unclaimed node that feeds a claimed
/// (or attributed) node to that node's op: in reverse graph order, the
/// first reader with an op decides.
void Importer::attributePlumbing() {
  auto nodes = g.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const onnx::NodeProto *n = *it;
    if (claimed.count(n))
      continue;
    for (const std::string &o : n->output()) {
      for (const onnx::NodeProto *c : o.empty()
                                          ? llvm::ArrayRef<const onnx::NodeProto *>()
                                          : g.consumers(o)) {
        auto cl = claimed.find(c);
        auto pl = plumbing.find(c);
        if (cl != claimed.end()) {
          plumbing.insert({n, cl->second.front()});
          break;
        }
        if (pl != plumbing.end()) {
          plumbing.insert({n, pl->second});
          break;
        }
      }
      if (plumbing.count(n))
        break;
    }
  }
}

/// ModelSpec::origins: each op's claimed nodes (then its plumbing), in
/// graph order.
void Importer::recordOrigins() {
  for (const onnx::NodeProto *n : g.nodes())
    if (auto it = claimed.find(n); it != claimed.end())
      for (Site s : it->second)
        spec.origins[{s.block, s.site}].push_back(g.loc(*n));
  for (const onnx::NodeProto *n : g.nodes())
    if (auto it = plumbing.find(n); it != plumbing.end())
      spec.origins[{it->second.block, it->second.site}].push_back(g.loc(*n));
}

/// The names of the source locations an op of `module` carries.
static void originNames(Operation *op, std::vector<std::string> &out) {
  auto fused = dyn_cast<FusedLoc>(op->getLoc());
  auto tag = fused ? dyn_cast_or_null<StringAttr>(fused.getMetadata())
                   : StringAttr();
  if (!tag || tag.getValue() != kOriginsLocTag)
    return;
  for (Location l : fused.getLocations())
    if (auto name = dyn_cast<NameLoc>(l))
      out.push_back(name.getName().str());
}

/// The built module carries every claimed node exactly once (one op's
/// location): what the report prints is what the IR says.
LogicalResult Importer::checkOrigins(ModuleOp module) const {
  std::unordered_map<std::string, int> seen;
  module.walk([&](Operation *op) {
    std::vector<std::string> names;
    originNames(op, names);
    for (const std::string &n : names)
      ++seen[n];
  });
  for (const onnx::NodeProto *n : g.nodes()) {
    if (!claimed.count(n) && !plumbing.count(n))
      continue;
    auto it = claimed.find(n);
    int want = it != claimed.end() ? int(it->second.size()) : 1;
    int k = seen[g.nodeName(*n)];
    if (k != want) {
      g.error(*n) << "internal: the imported IR names this node in " << k
                  << " ops' locations; expected " << want;
      return failure();
    }
  }
  return success();
}

/// `moe-opt --onnx-report`: per block, which ONNX nodes each op computes.
void Importer::report(llvm::raw_ostream &os) const {
  size_t dead = 0;
  for (const onnx::NodeProto *n : g.nodes())
    if (!claimed.count(n) && !plumbing.count(n))
      ++dead;
  os << "ONNX import report: " << g.path() << "\n"
     << "  " << g.nodes().size() << " nodes: " << claimed.size()
     << " computed by the ops below, " << plumbing.size()
     << " statically known (shape plumbing, constants, masks, tables; "
        "listed after '+' with the op that reads them), "
     << dead << " unused (dead or constant-only, not part of the model)\n";
  auto line = [&](int64_t block, OpSite site) {
    std::vector<const onnx::NodeProto *> own, extra;
    for (const onnx::NodeProto *n : g.nodes()) {
      auto c = claimed.find(n);
      if (c != claimed.end() &&
          llvm::any_of(c->second, [&](Site s) {
            return s.block == block && s.site == site;
          }))
        own.push_back(n);
      auto p = plumbing.find(n);
      if (p != plumbing.end() && p->second.block == block &&
          p->second.site == site)
        extra.push_back(n);
    }
    if (own.empty() && extra.empty())
      return;
    os << "  " << opSiteName(site) << " <- " << own.size() << " node"
       << (own.size() == 1 ? "" : "s") << ":";
    for (const onnx::NodeProto *n : own)
      os << " " << g.nodeName(*n) << " (" << n->op_type() << ")";
    if (!extra.empty()) {
      os << "; + " << extra.size() << " static:";
      for (const onnx::NodeProto *n : extra)
        os << " " << g.nodeName(*n);
    }
    os << "\n";
  };
  os << "model:\n";
  line(-1, OpSite::embedding);
  line(-1, OpSite::positions);
  for (size_t b = 0; b < spec.blocks.size(); ++b) {
    os << "block " << b << ":\n";
    for (OpSite s :
         {OpSite::attention, OpSite::attnResidual, OpSite::attnPostNorm,
          OpSite::ffnNorm, OpSite::gate, OpSite::dispatch, OpSite::expert,
          OpSite::combine, OpSite::sharedExpert, OpSite::sharedGate,
          OpSite::sharedAdd, OpSite::ffnResidual, OpSite::ffnPostNorm})
      line(b, s);
  }
  os << "head:\n";
  for (OpSite s : {OpSite::finalNorm, OpSite::lmHead, OpSite::loss})
    line(-1, s);
}

OwningOpRef<ModuleOp> Importer::run() {
  std::string stream;
  if (failed(findEmbedding(stream)))
    return nullptr;

  int index = 0;
  passNoOpCast(stream, Site{-1, OpSite::embedding});
  if (failed(findPositions(stream)))
    return nullptr;
  while (const onnx::NodeProto *add1 = residualAdd(stream)) {
    BlockSpec block(g.loc(*add1));
    if (failed(sublayer(stream, *add1, block, index, /*attention=*/true)))
      return nullptr;
    std::string mid = add1->output(0);
    passNoOpCast(mid, Site{index, OpSite::attnResidual});
    const onnx::NodeProto *add2 = residualAdd(mid);
    if (!add2) {
      // Post-norm (BERT): the FFN reads the normalised residual sum.
      FailureOr<bool> post =
          postNorm(mid, block, index, OpSite::attnPostNorm, false);
      if (failed(post))
        return nullptr;
      if (*post)
        add2 = residualAdd(mid);
    }
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
    stream = add2->output(0);
    passNoOpCast(stream, Site{index, OpSite::ffnResidual});
    if (block.postnorm &&
        failed(postNorm(stream, block, index, OpSite::ffnPostNorm, true)))
      return nullptr;
    spec.blocks.push_back(std::move(block));
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
  attributePlumbing();
  recordOrigins();
  OwningOpRef<ModuleOp> module = buildModule(spec, g.context());
  if (!module || failed(checkOrigins(*module)))
    return nullptr;
  if (opts.report)
    report(*opts.report);
  return module;
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
