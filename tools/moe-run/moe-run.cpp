//===- moe-run.cpp - run a scheduled training step on the CPU runtime -----===//
//
// Executes a scheduled step (the output of moe-flowmoe-pipeline) on this
// machine's ranks: every op becomes a task on its stream (compute: a CPU
// stream; communication: the priority pool), events become runtime events,
// collectives run over MPI. It is how every schedule is run and checked
// here: the loss and the updated parameters of one step must not depend on
// the policy or the pipelining degree.
//
//   mpirun -np 4 moe-run step.mlir [--steps N] [--seed S] [--dump FILE]
//
// Parameters imported from ONNX (`moe.source`) start from the file's
// weights, each rank reading its own experts; others (and all of them with
// --random-weights) are drawn from the seed.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/StreamOrder.h"
#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Frontend/WeightLoader.h"

#include "ParamLoading.h"

#include "moe_rt/collectives.h"
#include "moe_rt/moe_rt.h"
#include "moe_rt/ops.h"
#include "moe_rt/option_values.h"
#include "moe_rt/text_data.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>

using namespace mlir;
using namespace mlir::moe;

namespace {

struct Buffer {
  std::vector<int64_t> shape;
  std::vector<float> f;
  std::vector<int64_t> i;
  bool isInt = false;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  /// The runtime's view of this buffer. It lives as long as the buffer,
  /// as queued runtime calls require; the data never reallocates after
  /// allocation (copies into it keep its size).
  moe_rt_tensor *view() {
    t.data = isInt ? static_cast<void *>(i.data()) : f.data();
    t.rank = shape.size();
    for (size_t d = 0; d < shape.size(); ++d)
      t.shape[d] = shape[d];
    t.dtype = isInt ? MOE_RT_I64 : MOE_RT_F32;
    t.backend = MOE_RT_CPU;
    return &t;
  }
  moe_rt_tensor t{};
};

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "moe-run: error: %s\n", message.c_str());
  moe_rt_mpi_abort(2);
  std::exit(2);
}

class Runner {
public:
  Runner(FunctionOpInterface func, int rank, int world, uint64_t seed,
         double timeout)
      : func(func), rank(rank), world(world), seed(seed), timeout(timeout) {}

  /// Creates the world communicator and the step's arguments.
  void prepare();
  void run();
  std::vector<std::pair<std::string, Buffer *>> results();
  /// Writes every argument (parameters, token ids, labels) as
  /// "name DIMS values..." lines, for a reference implementation.
  void dumpInputs(const std::string &path);
  /// The updated parameters become the next step's arguments.
  void advance();
  /// Token ids and labels of `step` from a byte-level text corpus: each
  /// rank reads its own consecutive windows; labels are the next bytes.
  void loadText(const std::string &text, int step);

private:
  Buffer &buf(Value v);
  void allocate(Value v);
  void initArguments();
  moe_rt_stream streamFor(StreamAttr s);
  moe_rt_comm commFor(Operation *op, FlatSymbolRefAttr grid,
                      ArrayRef<int16_t> axes);
  void execute(Operation *op);
  void issueForward(Operation *op, moe_rt_stream s, ArrayRef<Buffer *> in,
                    ArrayRef<Buffer *> out);
  void issueBackward(Operation *fwd, moe_rt_stream s, ArrayRef<Buffer *> in,
                     ArrayRef<Buffer *> cotangents, ArrayRef<Buffer *> grads);
  void issueRouting(Operation *op, moe_rt_stream s, bool backward,
                    ArrayRef<Buffer *> in, ArrayRef<Buffer *> out);

  FunctionOpInterface func;
  int rank, world;
  uint64_t seed;
  double timeout;
  frontend::WeightLoader weights;

  /// noisy_topk's noise seed of the current step: fresh each step, the
  /// same for its forward and backward (moe_rt/ops.h).
  uint64_t gateSeed() const { return moe_rt_gate_step_seed(seed, step); }

public:
  /// The training step being run (1, 2, ...; main sets it before run()).
  int64_t step = 1;
  /// Start imported parameters from their `moe.source` (the ONNX file's
  /// weights) rather than from the seed.
  bool useSources = true;
  int loadedFromSource = 0;
  /// Relative moe.source files not found from the working directory are
  /// looked up next to the step's IR file.
  void setWeightsFallbackDirectory(StringRef dir) {
    weights.setFallbackDirectory(dir.empty() ? "." : dir);
  }

private:
  DenseMap<Value, std::unique_ptr<Buffer>> buffers;
  std::map<std::pair<int, int64_t>, moe_rt_stream> streams;
  DenseMap<Value, moe_rt_event> events;
  std::map<std::string, moe_rt_comm> comms;
  moe_rt_comm worldComm = nullptr;
};

Buffer &Runner::buf(Value v) {
  auto it = buffers.find(v);
  if (it == buffers.end())
    die("internal: value without a buffer");
  return *it->second;
}

void Runner::allocate(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type)
    return;
  if (!type.hasStaticShape())
    die("the step has dynamic shapes (dropless routing); bound them with "
        "moe-opt --moe-bound-dropless before --moe-flowmoe-pipeline");
  auto b = std::make_unique<Buffer>();
  b->shape.assign(type.getShape().begin(), type.getShape().end());
  b->isInt = isa<IntegerType>(type.getElementType());
  if (b->isInt)
    b->i.assign(b->numel(), 0);
  else
    b->f.assign(b->numel(), 0.0f);
  buffers[v] = std::move(b);
}

/// Every argument from ParamLoading (shared with moe-export-params, which
/// writes the same values for every rank at build time).
void Runner::initArguments() {
  for (BlockArgument arg : func.getFunctionBody().front().getArguments()) {
    allocate(arg);
    Buffer &b = buf(arg);
    auto values = run::initialValues(func, arg, rank, seed,
                                     useSources ? &weights : nullptr);
    if (!values)
      die(llvm::toString(values.takeError()));
    if (b.isInt)
      b.i = std::move(values->i);
    else
      b.f = std::move(values->f);
    loadedFromSource += values->fromSource;
  }
}

/// True when `v` reaches an op of type OpT through moe.split ops (the
/// micro-batch split sits between a token argument and its users).
template <typename OpT> bool reaches(Value v) {
  for (Operation *u : v.getUsers()) {
    if (isa<OpT>(u))
      return true;
    if (isa<SplitOp>(u))
      for (Value r : u->getResults())
        if (reaches<OpT>(r))
          return true;
  }
  return false;
}

void Runner::loadText(const std::string &text, int step) {
  for (BlockArgument arg : func.getFunctionBody().front().getArguments()) {
    Buffer &b = buf(arg);
    bool tokens = reaches<EmbeddingOp>(arg),
         labels = reaches<CrossEntropyOp>(arg);
    if (!b.isInt || (!tokens && !labels) || b.shape.size() != 2)
      continue;
    if (tokens)
      for (Operation *u : arg.getUsers())
        if (auto e = dyn_cast<EmbeddingOp>(u))
          if (cast<RankedTensorType>(e.getTable().getType()).getDimSize(0) <
              moe_rt::text_data::kByteVocabulary)
            die(moe_rt::text_data::vocabularyError());
    // The windows rule is shared with the generated-step driver
    // (examples/codegen/driver.cpp --data): moe_rt/text_data.h.
    std::string error;
    if (!moe_rt::text_data::fill(text, step, world, rank, b.shape[0],
                                 b.shape[1], labels, b.i.data(), error))
      die("--data: " + error);
  }
}

moe_rt_stream Runner::streamFor(StreamAttr s) {
  auto key = std::make_pair(int(s.getKind()), s.getIndex());
  auto it = streams.find(key);
  if (it != streams.end())
    return it->second;
  moe_rt_stream stream;
  moe_rt_status st = s.getKind() == StreamKind::comm
                         ? moe_rt_stream_create_pool(&stream)
                         : moe_rt_stream_create(MOE_RT_CPU, &stream);
  if (st != MOE_RT_OK)
    die(moe_rt_last_error());
  return streams[key] = stream;
}

/// The group of `axes` of `grid`: ranks sharing their coordinates on the
/// other axes (row-major rank order).
moe_rt_comm Runner::commFor(Operation *op, FlatSymbolRefAttr gridName,
                            ArrayRef<int16_t> axes) {
  std::string key = gridName.getValue().str();
  for (int16_t a : axes)
    key += "," + std::to_string(a);
  if (auto it = comms.find(key); it != comms.end())
    return it->second;
  SymbolTableCollection table;
  auto grid = table.lookupNearestSymbolFrom<shard::GridOp>(op, gridName);
  ArrayRef<int64_t> shape = grid.getShape();
  int64_t size = 1;
  for (int64_t d : shape)
    size *= d;
  if (size != world)
    die("the step's grid has " + std::to_string(size) +
        " ranks but moe-run runs on " + std::to_string(world) +
        " (use mpirun -np " + std::to_string(size) + ")");
  // Coordinates of this rank; color = index over the non-group axes.
  std::vector<int64_t> coord(shape.size());
  for (int64_t r = rank, d = shape.size() - 1; d >= 0; --d) {
    coord[d] = r % shape[d];
    r /= shape[d];
  }
  int color = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    if (!llvm::is_contained(axes, int16_t(d)))
      color = color * shape[d] + coord[d];
  moe_rt_comm comm;
  if (moe_rt_comm_split(worldComm, color, &comm) != MOE_RT_OK)
    die(moe_rt_last_error());
  return comms[key] = comm;
}

/// moe.attention's attributes as moe_rt_attention takes them.
moe_rt_attention_attrs attentionAttrs(AttentionOp a) {
  std::optional<NormKind> norm = a.getNorm();
  moe_rt_attention_attrs attrs{};
  attrs.heads = a.getNumHeads();
  attrs.kv_heads = a.getNumKvHeads();
  attrs.head_dim = a.getHeadDim();
  attrs.causal = a.getCausal();
  attrs.rotary = a.getRotary();
  attrs.norm = !norm                    ? MOE_RT_NORM_NONE
               : *norm == NormKind::rms ? MOE_RT_NORM_RMS
                                        : MOE_RT_NORM_LAYER;
  attrs.eps = a.getEpsilon().convertToDouble();
  return attrs;
}

moe_rt_norm_kind normKind(NormOp n) {
  return n.getKind() == NormKind::rms ? MOE_RT_NORM_RMS : MOE_RT_NORM_LAYER;
}

/// The runtime's gate kind (the same numbering as GateKind). expert_choice
/// needs nothing more: its capacity is the E x C indices' second dimension
/// (the result buffers' shapes), and dispatch/combine tell its routing from
/// those E x C indices.
moe_rt_gate_kind gateKind(GateOp g) {
  return moe_rt_gate_kind(int(g.getKind()));
}

/// The i-th buffer's tensor, or NULL past the end (an absent optional
/// operand: a bias, a gated expert's gate projection).
moe_rt_tensor *opt(ArrayRef<Buffer *> b, size_t i) {
  return i < b.size() ? b[i]->view() : nullptr;
}

/// Gate and down projections of an expert op's operands (x, up, [gate],
/// down) and of its gradients (dx, dup, [dgate], ddown).
std::pair<moe_rt_tensor *, moe_rt_tensor *> gateDown(ArrayRef<Buffer *> b,
                                                     bool gated) {
  return {gated ? b[2]->view() : nullptr, b[gated ? 3 : 2]->view()};
}

void check(moe_rt_status st) {
  if (st != MOE_RT_OK)
    die(moe_rt_last_error());
}

/// Forward compute ops: queues the op's runtime call (moe_rt/ops.h) on `s`,
/// reading `in` (the op's operands) and writing `out` (its results).
void Runner::issueForward(Operation *op, moe_rt_stream s, ArrayRef<Buffer *> in,
                          ArrayRef<Buffer *> out) {
  moe_rt_tensor *y = out.empty() ? nullptr : out[0]->view();
  if (auto a = dyn_cast<AttentionOp>(op)) {
    moe_rt_attention_attrs attrs = attentionAttrs(a);
    check(moe_rt_attention(s, &attrs, in[0]->view(), in[1]->view(),
                           in[2]->view(), in[3]->view(), in[4]->view(),
                           opt(in, 5), opt(in, 6), y));
  } else if (auto n = dyn_cast<NormOp>(op)) {
    check(moe_rt_norm(s, normKind(n), n.getEpsilon().convertToDouble(),
                      in[0]->view(), in[1]->view(), opt(in, 2), y));
  } else if (isa<LinearOp>(op)) {
    check(moe_rt_linear(s, in[0]->view(), in[1]->view(), opt(in, 2), y));
  } else if (isa<EmbeddingOp>(op)) {
    check(moe_rt_embedding(s, in[0]->view(), in[1]->view(), y));
  } else if (isa<CrossEntropyOp>(op)) {
    check(moe_rt_cross_entropy(s, in[0]->view(), in[1]->view(), y));
  } else if (auto g = dyn_cast<GateOp>(op)) {
    if (g.getKind() == GateKind::softmax_topk)
      check(moe_rt_gate_topk(s, g.getTopK(), g.getNormalize(), in[0]->view(),
                             in[1]->view(), y, out[1]->view(), out[2]->view()));
    else
      check(moe_rt_gate_at(s, gateKind(g), g.getTopK(), g.getNormalize(),
                           gateSeed(), g.getSampleOffsetOrZero(),
                           g.getTauOrDefault(), in[0]->view(), in[1]->view(),
                           opt(in, 2), y, out[1]->view(), out[2]->view()));
  } else if (auto x = dyn_cast<ExpertOp>(op)) {
    auto [gate, down] = gateDown(in, x.isGated());
    check(moe_rt_expert(s, moe_rt_activation(int(x.getActivation())),
                        in[0]->view(), in[1]->view(), gate, down, y));
  } else if (auto x = dyn_cast<SharedExpertOp>(op)) {
    auto [gate, down] = gateDown(in, static_cast<bool>(x.getGateProj()));
    check(moe_rt_expert(s, moe_rt_activation(int(x.getActivation())),
                        in[0]->view(), in[1]->view(), gate, down, y));
  } else if (isa<arith::AddFOp>(op)) {
    check(moe_rt_add(s, in[0]->view(), in[1]->view(), y));
  } else if (isa<SplitOp>(op)) {
    int64_t offset = 0;
    for (Buffer *o : out) {
      check(moe_rt_copy(s, in[0]->view(), offset, o->view(), 0, o->numel()));
      offset += o->numel();
    }
  } else if (isa<MergeOp>(op)) {
    int64_t offset = 0;
    for (Buffer *i : in) {
      check(moe_rt_copy(s, i->view(), 0, y, offset, i->numel()));
      offset += i->numel();
    }
  } else if (auto sgd = dyn_cast<SgdOp>(op)) {
    check(moe_rt_sgd(s, in[0]->view(), in[1]->view(),
                     sgd.getLr().convertToDouble(), y));
  } else {
    die("moe-run cannot execute '" + op->getName().getStringRef().str() + "'");
  }
}

/// vjp compute ops: queues the backward call, which overwrites `g`.
void Runner::issueBackward(Operation *fwd, moe_rt_stream s,
                           ArrayRef<Buffer *> in, ArrayRef<Buffer *> ct,
                           ArrayRef<Buffer *> g) {
  if (auto a = dyn_cast<AttentionOp>(fwd)) {
    moe_rt_attention_attrs attrs = attentionAttrs(a);
    check(moe_rt_attention_grad(
        s, &attrs, in[0]->view(), in[1]->view(), in[2]->view(), in[3]->view(),
        in[4]->view(), opt(in, 5), opt(in, 6), ct[0]->view(), g[0]->view(),
        g[1]->view(), g[2]->view(), g[3]->view(), g[4]->view(), opt(g, 5),
        opt(g, 6)));
  } else if (auto n = dyn_cast<NormOp>(fwd)) {
    check(moe_rt_norm_grad(s, normKind(n), n.getEpsilon().convertToDouble(),
                           in[0]->view(), in[1]->view(), opt(in, 2),
                           ct[0]->view(), g[0]->view(), g[1]->view(),
                           opt(g, 2)));
  } else if (isa<LinearOp>(fwd)) {
    check(moe_rt_linear_grad(s, in[0]->view(), in[1]->view(), ct[0]->view(),
                             g[0]->view(), g[1]->view(), opt(g, 2)));
  } else if (isa<EmbeddingOp>(fwd)) {
    check(moe_rt_embedding_grad(s, in[0]->view(), ct[0]->view(), g[0]->view()));
  } else if (isa<CrossEntropyOp>(fwd)) {
    check(moe_rt_cross_entropy_grad(s, in[0]->view(), in[1]->view(),
                                    ct[0]->view(), g[0]->view()));
  } else if (auto gate = dyn_cast<GateOp>(fwd)) {
    if (gate.getKind() == GateKind::softmax_topk)
      check(moe_rt_gate_topk_grad(s, gate.getTopK(), gate.getNormalize(),
                                  in[0]->view(), in[1]->view(), ct[0]->view(),
                                  g[0]->view(), g[1]->view()));
    else
      check(moe_rt_gate_grad_at(
          s, gateKind(gate), gate.getTopK(), gate.getNormalize(), gateSeed(),
          gate.getSampleOffsetOrZero(), gate.getTauOrDefault(), in[0]->view(),
          in[1]->view(), opt(in, 2), ct[0]->view(), g[0]->view(), g[1]->view(),
          opt(g, 2)));
  } else if (auto x = dyn_cast<ExpertOp>(fwd)) {
    auto [gp, down] = gateDown(in, x.isGated());
    auto [dgp, ddown] = gateDown(g, x.isGated());
    check(moe_rt_expert_grad(s, moe_rt_activation(int(x.getActivation())),
                             in[0]->view(), in[1]->view(), gp, down,
                             ct[0]->view(), g[0]->view(), g[1]->view(), dgp,
                             ddown));
  } else if (auto x = dyn_cast<SharedExpertOp>(fwd)) {
    bool gated = static_cast<bool>(x.getGateProj());
    auto [gp, down] = gateDown(in, gated);
    auto [dgp, ddown] = gateDown(g, gated);
    check(moe_rt_expert_grad(s, moe_rt_activation(int(x.getActivation())),
                             in[0]->view(), in[1]->view(), gp, down,
                             ct[0]->view(), g[0]->view(), g[1]->view(), dgp,
                             ddown));
  } else {
    die("moe-run cannot differentiate '" + fwd->getName().getStringRef().str() +
        "'");
  }
}

/// Dispatch / combine and their vjps: the runtime's routing calls, which
/// queue their layout kernels around the group's all-to-all on `s`.
/// `in` holds the forward op's operands, then (for a vjp) the cotangents.
void Runner::issueRouting(Operation *op, moe_rt_stream s, bool backward,
                          ArrayRef<Buffer *> in, ArrayRef<Buffer *> out) {
  auto collective = cast<CollectiveOpInterface>(op);
  moe_rt_comm comm =
      commFor(op, collective.getGridAttr(), collective.getAxes());
  bool isDispatch = isa<DispatchOp>(op);
  RoutingShape shape = *routingShape(op);
  int64_t experts = shape.experts;
  std::optional<int64_t> cap = shape.capacity;
  if (!cap)
    die("dropless dispatch is not supported by moe-run yet");
  if (isDispatch && !backward)
    check(moe_rt_dispatch(s, comm, experts, *cap, in[0]->view(), in[1]->view(),
                          out[0]->view()));
  else if (isDispatch) // operands x, indices, slots; cotangent d(result)
    check(moe_rt_dispatch_grad(s, comm, experts, *cap, in[1]->view(),
                               in[3]->view(), out[0]->view()));
  else if (!backward)
    check(moe_rt_combine(s, comm, experts, *cap, in[0]->view(), in[1]->view(),
                         in[2]->view(), out[0]->view()));
  else // operands expert_out, indices, weights, slots; cotangent d(result)
    check(moe_rt_combine_grad(s, comm, experts, *cap, in[0]->view(),
                              in[1]->view(), in[2]->view(), in[4]->view(),
                              out[0]->view(), out[1]->view()));
}

void Runner::execute(Operation *op) {
  if (auto c = dyn_cast<arith::ConstantOp>(op)) {
    allocate(c.getResult());
    auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
    if (!dense || !dense.isSplat())
      die("moe-run supports splat tensor constants only");
    Buffer &b = buf(c.getResult());
    if (b.isInt)
      std::fill(b.i.begin(), b.i.end(),
                dense.getSplatValue<APInt>().getSExtValue());
    else
      std::fill(b.f.begin(), b.f.end(),
                dense.getSplatValue<APFloat>().convertToFloat());
    return;
  }
  StreamAttr stream = StreamOrder::getStream(op);
  if (!stream)
    die("'" + op->getName().getStringRef().str() +
        "' is not on a stream: run moe-opt --moe-flowmoe-pipeline first");
  moe_rt_stream s = streamFor(stream);
  if (auto r = dyn_cast<RecordEventOp>(op)) {
    moe_rt_event e;
    if (moe_rt_event_create(MOE_RT_CPU, &e) != MOE_RT_OK ||
        moe_rt_event_record(e, s) != MOE_RT_OK)
      die(moe_rt_last_error());
    events[r.getEvent()] = e;
    return;
  }
  if (auto w = dyn_cast<WaitEventOp>(op)) {
    if (moe_rt_stream_wait_event(s, events.lookup(w.getEvent()), timeout) !=
        MOE_RT_OK)
      die(moe_rt_last_error());
    return;
  }
  for (Value r : op->getResults())
    allocate(r);
  SmallVector<Buffer *> in, out;
  for (Value v : op->getOperands())
    in.push_back(&buf(v));
  for (Value v : op->getResults())
    out.push_back(&buf(v));

  if (auto ar = dyn_cast<AllReduceOp>(op)) {
    // Copy and reduce on the pool's low-priority queue (FlowMoE: all-reduce
    // chunks yield to the all-to-alls).
    moe_rt_comm comm = commFor(op, ar.getGridAttr(), ar.getAxes());
    int64_t offset = 0, size = -1;
    if (auto bytes = ar.getBytes()) {
      offset = (*bytes)[0];
      size = (*bytes)[1];
    }
    for (auto [src, dst] : llvm::zip(in, out))
      check(moe_rt_all_reduce_into(s, comm, src->view(), dst->view(), offset,
                                   size));
    return;
  }
  if (isa<DispatchOp, CombineOp>(op))
    return issueRouting(op, s, false, in, out);
  if (auto vjp = dyn_cast<VjpOp>(op)) {
    Operation *fwd = vjp.getForwardOp();
    size_t primals = vjp.getPrimals().size();
    if (isa<DispatchOp, CombineOp>(fwd))
      return issueRouting(fwd, s, true, in, out);
    return issueBackward(fwd, s, ArrayRef(in).take_front(primals),
                         ArrayRef(in).drop_front(primals), out);
  }
  if (op->hasTrait<OpTrait::IsTerminator>())
    return;
  issueForward(op, s, in, out);
}

void Runner::prepare() {
  if (moe_rt_comm_create_world(timeout, 1, &worldComm) != MOE_RT_OK)
    die(moe_rt_last_error());
  initArguments();
}

void Runner::run() {
  for (Operation &op : func.getFunctionBody().front())
    if (!isa<func::ReturnOp>(op))
      execute(&op);
  for (auto &[key, s] : streams)
    if (moe_rt_stream_synchronize(s, timeout > 0 ? 4 * timeout : 0) !=
        MOE_RT_OK)
      die(std::string("rank ") + std::to_string(rank) + ": " +
          moe_rt_last_error());
}

void Runner::dumpInputs(const std::string &path) {
  FILE *f = std::fopen(path.c_str(), "w");
  if (!f)
    die("cannot write '" + path + "'");
  for (BlockArgument arg : func.getFunctionBody().front().getArguments()) {
    auto name = func.getArgAttrOfType<StringAttr>(
        arg.getArgNumber(), MoeDialect::getParamAttrName());
    Buffer &b = buf(arg);
    std::string dims;
    for (int64_t d : b.shape)
      dims += (dims.empty() ? "" : "x") + std::to_string(d);
    std::fprintf(f, "%s %s",
                 name ? name.getValue().str().c_str()
                      : ("arg" + std::to_string(arg.getArgNumber())).c_str(),
                 dims.c_str());
    if (b.isInt)
      for (int64_t v : b.i)
        std::fprintf(f, " %lld", (long long)v);
    else
      for (float v : b.f)
        std::fprintf(f, " %.9g", v);
    std::fprintf(f, "\n");
  }
  std::fclose(f);
}

std::vector<std::pair<std::string, Buffer *>> Runner::results() {
  std::vector<std::pair<std::string, Buffer *>> out;
  auto ret =
      cast<func::ReturnOp>(func.getFunctionBody().front().getTerminator());
  Block &entry = func.getFunctionBody().front();
  std::vector<std::string> names = {"loss"};
  for (BlockArgument arg : entry.getArguments())
    if (auto n = func.getArgAttrOfType<StringAttr>(
            arg.getArgNumber(), MoeDialect::getParamAttrName()))
      names.push_back(n.getValue().str());
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    out.push_back(
        {i < names.size() ? names[i] : "result" + std::to_string(i), &buf(v)});
  return out;
}

void Runner::advance() {
  Block &entry = func.getFunctionBody().front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  // The step returns the loss, then the new parameters in argument order.
  unsigned next = 1;
  for (BlockArgument arg : entry.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), MoeDialect::getParamAttrName()))
      buf(arg).f = buf(ret.getOperand(next++)).f;
}

} // namespace

int main(int argc, char **argv) {
  if (moe_rt_mpi_init(&argc, &argv) != MOE_RT_OK) {
    std::fprintf(stderr, "moe-run: error: %s\n", moe_rt_last_error());
    return 2;
  }
  std::string input, dump, dumpInputs;
  int steps = 1;
  uint64_t seed = 1;
  bool randomWeights = false;
  std::string dataPath;
  double timeout = 60;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--steps") {
      std::string v = value();
      std::optional<uint64_t> n = moe_rt::options::wholeNumber(v);
      if (!n || *n < 1 || *n > uint64_t(INT32_MAX))
        die("--steps needs a positive integer, got '" + v + "'");
      steps = int(*n);
    } else if (a == "--seed") {
      std::string v = value();
      std::optional<uint64_t> n = moe_rt::options::wholeNumber(v);
      if (!n)
        die("--seed needs a non-negative integer, got '" + v + "'");
      seed = *n;
    }
    else if (a == "--dump")
      dump = value();
    else if (a == "--data")
      dataPath = value();
    else if (a == "--random-weights")
      randomWeights = true;
    else if (a == "--dump-inputs")
      dumpInputs = value();
    else if (a == "--timeout") {
      std::string v = value();
      std::optional<double> t = moe_rt::options::nonNegativeNumber(v);
      if (!t)
        die("--timeout needs a number of seconds >= 0, got '" + v + "'");
      timeout = *t;
    }
    else if (a == "-h" || a == "--help") {
      std::printf("usage: mpirun -np P moe-run STEP.mlir [--steps N] "
                  "[--seed S] [--data TEXT] [--random-weights] [--dump FILE] [--dump-inputs "
                  "FILE] [--timeout SECONDS]\n");
      moe_rt_mpi_finalize();
      return 0;
    } else if (!a.empty() && a[0] == '-')
      die("unknown argument '" + a + "'");
    else
      input = a;
  }
  if (input.empty())
    die("no input step (moe-run STEP.mlir)");

  MLIRContext context;
  llvm::Expected<run::LoadedStep> loaded = run::loadScheduledStep(input, context);
  if (!loaded)
    die(llvm::toString(loaded.takeError()));
  FunctionOpInterface step = loaded->func;

  int rank = 0, world = 1;
  {
    moe_rt_comm probe;
    if (moe_rt_comm_create_world(timeout, 0, &probe) != MOE_RT_OK)
      die(moe_rt_last_error());
    rank = moe_rt_comm_rank(probe);
    world = moe_rt_comm_size(probe);
    moe_rt_comm_destroy(probe);
  }
  Runner runner(step, rank, world, seed, timeout);
  runner.useSources = !randomWeights;
  runner.setWeightsFallbackDirectory(llvm::sys::path::parent_path(input));
  runner.prepare();
  if (rank == 0 && runner.loadedFromSource)
    std::fprintf(stderr,
                 "moe-run: %d parameters start from their ONNX source\n",
                 runner.loadedFromSource);
  std::string text;
  if (!dataPath.empty()) {
    std::ifstream in(dataPath, std::ios::binary);
    if (!in)
      die("cannot read --data '" + dataPath + "'");
    text.assign(std::istreambuf_iterator<char>(in), {});
    runner.loadText(text, 0);
  }
  if (!dumpInputs.empty())
    runner.dumpInputs(dumpInputs + ".rank" + std::to_string(rank));
  auto start = std::chrono::steady_clock::now();
  for (int s = 1; s <= steps; ++s) {
    if (!text.empty() && s > 1)
      runner.loadText(text, s - 1);
    runner.step = s;
    runner.run();
    auto res = runner.results();
    // Global mean loss over the data-parallel ranks.
    Buffer &loss = *res[0].second;
    moe_rt_stream sync;
    moe_rt_stream_create_pool(&sync);
    moe_rt_comm all;
    moe_rt_comm_create_world(timeout, 0, &all);
    Buffer total = loss;
    moe_rt_all_reduce(sync, all, total.view(), 0, -1);
    if (moe_rt_stream_synchronize(sync, timeout) != MOE_RT_OK)
      die(moe_rt_last_error());
    moe_rt_stream_destroy(sync);
    moe_rt_comm_destroy(all);
    if (rank == 0) {
      std::chrono::duration<double> elapsed =
          std::chrono::steady_clock::now() - start;
      std::printf("step %d loss %.6f\n", s, total.f[0] / world);
      if (steps > 1) // progress on stderr, the numbers stay parseable
        std::fprintf(stderr, "[%d/%d] %.2f s/step, %.0f s left\n", s, steps,
                     elapsed.count() / s,
                     elapsed.count() / s * (steps - s));
    }
    std::fflush(stdout);
    if (s < steps)
      runner.advance();
  }
  if (!dump.empty()) {
    std::string path = dump + ".rank" + std::to_string(rank);
    FILE *f = std::fopen(path.c_str(), "w");
    if (!f)
      die("cannot write '" + path + "'");
    for (auto &[name, b] : runner.results()) {
      std::fprintf(f, "%s %lld", name.c_str(), (long long)b->numel());
      for (float v : b->f)
        std::fprintf(f, " %.9g", v);
      std::fprintf(f, "\n");
    }
    std::fclose(f);
  }
  moe_rt_mpi_finalize();
  return 0;
}
