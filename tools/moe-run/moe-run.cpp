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
//===----------------------------------------------------------------------===//

#include "moe/Analysis/StreamOrder.h"
#include "moe/Dialect/Moe/MoeOps.h"

#include "moe_rt/collectives.h"
#include "moe_rt/kernels/Attention.h"
#include "moe_rt/kernels/Expert.h"
#include "moe_rt/kernels/Routing.h"
#include "moe_rt/moe_rt.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>

using namespace mlir;
using namespace mlir::moe;
namespace k = moe_rt::kernels;

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
  moe_rt_tensor tensor() {
    moe_rt_tensor t{};
    t.data = f.data();
    t.rank = shape.size();
    for (size_t d = 0; d < shape.size(); ++d)
      t.shape[d] = shape[d];
    t.dtype = MOE_RT_F32;
    t.backend = MOE_RT_CPU;
    return t;
  }
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

private:
  Buffer &buf(Value v);
  void allocate(Value v);
  void initArguments();
  moe_rt_stream streamFor(StreamAttr s);
  moe_rt_comm commFor(Operation *op, FlatSymbolRefAttr grid,
                      ArrayRef<int16_t> axes);
  void enqueue(moe_rt_stream s, bool low, std::function<int()> task);
  void execute(Operation *op);
  void computeForward(Operation *op, ArrayRef<Buffer *> in,
                      ArrayRef<Buffer *> out);
  void computeBackward(Operation *fwd, ArrayRef<Buffer *> primals,
                       ArrayRef<Buffer *> cotangents, ArrayRef<Buffer *> grads);
  void dispatchOrCombine(Operation *op, moe_rt_stream s, bool backward,
                         ArrayRef<Buffer *> in, ArrayRef<Buffer *> out);

  FunctionOpInterface func;
  int rank, world;
  uint64_t seed;
  double timeout;
  DenseMap<Value, std::unique_ptr<Buffer>> buffers;
  std::map<std::pair<int, int64_t>, moe_rt_stream> streams;
  DenseMap<Value, moe_rt_event> events;
  std::map<std::string, moe_rt_comm> comms;
  moe_rt_comm worldComm = nullptr;
  std::vector<std::unique_ptr<std::function<int()>>> tasks;
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
    die("dynamic shapes (dropless routing) are not supported by moe-run yet");
  auto b = std::make_unique<Buffer>();
  b->shape.assign(type.getShape().begin(), type.getShape().end());
  b->isInt = isa<IntegerType>(type.getElementType());
  if (b->isInt)
    b->i.assign(b->numel(), 0);
  else
    b->f.assign(b->numel(), 0.0f);
  buffers[v] = std::move(b);
}

/// Parameters: deterministic from their name (replicated weights equal on
/// every rank; expert weights differ per rank, as each holds other experts).
/// Token ids and labels: per rank.
void Runner::initArguments() {
  Block &entry = func.getFunctionBody().front();
  for (BlockArgument arg : entry.getArguments()) {
    allocate(arg);
    Buffer &b = buf(arg);
    auto name = func.getArgAttrOfType<StringAttr>(
        arg.getArgNumber(), MoeDialect::getParamAttrName());
    bool expert = llvm::any_of(arg.getUsers(), [](Operation *u) {
      return isa<ExpertOp>(u) ||
             (isa<VjpOp>(u) && isa<ExpertOp>(cast<VjpOp>(u).getForwardOp()));
    });
    uint64_t h = llvm::hash_value(name ? name.getValue() : StringRef("input"));
    std::mt19937_64 rng(seed ^ h ^ (expert || !name ? (rank + 1) * 7919 : 0) ^
                        arg.getArgNumber());
    if (b.isInt) {
      // Token ids / labels: in range of the embedding table or the logits.
      int64_t vocab = 2;
      for (BlockArgument other : entry.getArguments())
        if (auto t = dyn_cast<RankedTensorType>(other.getType()))
          if (func.getArgAttr(other.getArgNumber(),
                              MoeDialect::getParamAttrName()) &&
              t.getRank() == 2)
            for (Operation *u : other.getUsers())
              if (isa<EmbeddingOp>(u))
                vocab = t.getDimSize(0);
      std::uniform_int_distribution<int64_t> d(0, vocab - 1);
      for (int64_t &v : b.i)
        v = d(rng);
      continue;
    }
    bool isNormScale = name && name.getValue().ends_with(".scale");
    bool isNormBias = name && name.getValue().ends_with(".bias");
    int64_t fanIn = b.shape.size() >= 2 ? b.shape[b.shape.size() - 2] : 1;
    std::uniform_real_distribution<float> d(-1.0f / std::sqrt(float(fanIn)),
                                            1.0f / std::sqrt(float(fanIn)));
    for (float &v : b.f)
      v = isNormScale  ? 1.0f + 0.1f * d(rng)
          : isNormBias ? 0.1f * d(rng)
                       : d(rng);
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

int trampoline(void *p) { return (*static_cast<std::function<int()> *>(p))(); }

void Runner::enqueue(moe_rt_stream s, bool low, std::function<int()> task) {
  tasks.push_back(std::make_unique<std::function<int()>>(std::move(task)));
  moe_rt_status st =
      low ? moe_rt_stream_enqueue_low(s, trampoline, tasks.back().get())
          : moe_rt_stream_enqueue(s, trampoline, tasks.back().get());
  if (st != MOE_RT_OK)
    die(moe_rt_last_error());
}

/// The kernel's view of a moe.attention on a B x N x M input.
k::AttentionShape attentionShape(AttentionOp a, const Buffer &x) {
  std::optional<NormKind> norm = a.getNorm();
  return {x.shape[0],
          x.shape[1],
          x.shape[2],
          a.getNumHeads(),
          a.getNumKvHeads(),
          a.getHeadDim(),
          a.getCausal(),
          a.getRotary(),
          !norm                    ? 0
          : *norm == NormKind::rms ? 2
                                   : 1,
          a.getEpsilon().convertToDouble()};
}

/// Forward compute ops: reads `in` (the op's operands), writes `out`.
void Runner::computeForward(Operation *op, ArrayRef<Buffer *> in,
                            ArrayRef<Buffer *> out) {
  if (auto a = dyn_cast<AttentionOp>(op)) {
    k::AttentionShape s = attentionShape(a, *in[0]);
    const float *scale = in.size() > 5 ? in[5]->f.data() : nullptr;
    const float *bias = in.size() > 6 ? in[6]->f.data() : nullptr;
    k::attentionForward(s, in[0]->f.data(), in[1]->f.data(), in[2]->f.data(),
                        in[3]->f.data(), in[4]->f.data(), scale, bias,
                        out[0]->f.data());
  } else if (auto n = dyn_cast<NormOp>(op)) {
    int64_t m = in[0]->shape.back();
    k::normForward(n.getKind() == NormKind::rms, in[0]->numel() / m, m,
                   in[0]->f.data(), in[1]->f.data(),
                   in.size() > 2 ? in[2]->f.data() : nullptr,
                   n.getEpsilon().convertToDouble(), out[0]->f.data());
  } else if (isa<LinearOp>(op)) {
    int64_t kk = in[1]->shape[0], nn = in[1]->shape[1];
    k::linearForward(in[0]->numel() / kk, kk, nn, in[0]->f.data(),
                     in[1]->f.data(), in.size() > 2 ? in[2]->f.data() : nullptr,
                     out[0]->f.data());
  } else if (isa<EmbeddingOp>(op)) {
    if (!k::embeddingForward(in[0]->numel(), in[1]->shape[0], in[1]->shape[1],
                             in[0]->i.data(), in[1]->f.data(),
                             out[0]->f.data()))
      die("token id outside the embedding table");
  } else if (isa<CrossEntropyOp>(op)) {
    int64_t v = in[0]->shape.back();
    if (!k::crossEntropyForward(in[0]->numel() / v, v, in[0]->f.data(),
                                in[1]->i.data(), out[0]->f.data()))
      die("label outside the vocabulary");
  } else if (auto g = dyn_cast<GateOp>(op)) {
    if (g.getKind() != GateKind::softmax_topk)
      die("moe-run supports the softmax_topk gate only so far");
    int64_t m = in[0]->shape[2], e = g.getNumExperts(), t = in[0]->numel() / m;
    std::vector<float> logits(t * e);
    k::linearForward(t, m, e, in[0]->f.data(), in[1]->f.data(),
                     (const float *)nullptr, logits.data());
    k::softmaxTopK(t, e, int64_t(g.getTopK()), g.getNormalize(), logits.data(),
                   out[0]->i.data(), out[1]->f.data(), out[2]->i.data());
  } else if (auto x = dyn_cast<ExpertOp>(op)) {
    auto act = k::Activation(int(x.getActivation()));
    bool gated = x.isGated();
    const Buffer *down = in[gated ? 3 : 2];
    k::expertForward(act, in[0]->shape[0], in[0]->shape[1], in[0]->shape[2],
                     in[1]->shape[2], in[0]->f.data(), in[1]->f.data(),
                     gated ? in[2]->f.data() : nullptr, down->f.data(),
                     out[0]->f.data());
  } else if (auto x = dyn_cast<SharedExpertOp>(op)) {
    bool gated = static_cast<bool>(x.getGateProj());
    int64_t m = in[0]->shape.back();
    k::expertForward(k::Activation(int(x.getActivation())), 1,
                     in[0]->numel() / m, m, in[1]->shape[1], in[0]->f.data(),
                     in[1]->f.data(), gated ? in[2]->f.data() : nullptr,
                     in[gated ? 3 : 2]->f.data(), out[0]->f.data());
  } else if (isa<arith::AddFOp>(op)) {
    for (int64_t i = 0, e = out[0]->numel(); i < e; ++i)
      out[0]->f[i] = in[0]->f[i] + in[1]->f[i];
  } else if (isa<SplitOp>(op)) {
    size_t offset = 0;
    for (Buffer *o : out) {
      if (in[0]->isInt)
        std::copy(in[0]->i.begin() + offset,
                  in[0]->i.begin() + offset + o->numel(), o->i.begin());
      else
        std::copy(in[0]->f.begin() + offset,
                  in[0]->f.begin() + offset + o->numel(), o->f.begin());
      offset += o->numel();
    }
  } else if (isa<MergeOp>(op)) {
    size_t offset = 0;
    for (Buffer *i : in) {
      if (out[0]->isInt)
        std::copy(i->i.begin(), i->i.end(), out[0]->i.begin() + offset);
      else
        std::copy(i->f.begin(), i->f.end(), out[0]->f.begin() + offset);
      offset += i->numel();
    }
  } else if (auto s = dyn_cast<SgdOp>(op)) {
    float lr = float(s.getLr().convertToDouble());
    for (int64_t i = 0, e = out[0]->numel(); i < e; ++i)
      out[0]->f[i] = in[0]->f[i] - lr * in[1]->f[i];
  } else {
    die("moe-run cannot execute '" + op->getName().getStringRef().str() + "'");
  }
}

/// vjp compute ops: accumulates into `grads` (zeroed before).
void Runner::computeBackward(Operation *fwd, ArrayRef<Buffer *> in,
                             ArrayRef<Buffer *> ct, ArrayRef<Buffer *> g) {
  if (auto a = dyn_cast<AttentionOp>(fwd)) {
    k::AttentionShape s = attentionShape(a, *in[0]);
    const float *scale = in.size() > 5 ? in[5]->f.data() : nullptr;
    const float *bias = in.size() > 6 ? in[6]->f.data() : nullptr;
    k::attentionBackward(s, in[0]->f.data(), in[1]->f.data(), in[2]->f.data(),
                         in[3]->f.data(), in[4]->f.data(), scale, bias,
                         ct[0]->f.data(), g[0]->f.data(), g[1]->f.data(),
                         g[2]->f.data(), g[3]->f.data(), g[4]->f.data(),
                         g.size() > 5 ? g[5]->f.data() : nullptr,
                         g.size() > 6 ? g[6]->f.data() : nullptr);
  } else if (auto n = dyn_cast<NormOp>(fwd)) {
    int64_t m = in[0]->shape.back();
    k::normBackward(n.getKind() == NormKind::rms, in[0]->numel() / m, m,
                    in[0]->f.data(), in[1]->f.data(),
                    n.getEpsilon().convertToDouble(), ct[0]->f.data(),
                    g[0]->f.data(), g[1]->f.data(),
                    g.size() > 2 ? g[2]->f.data() : nullptr);
  } else if (isa<LinearOp>(fwd)) {
    int64_t kk = in[1]->shape[0], nn = in[1]->shape[1];
    k::linearBackward(in[0]->numel() / kk, kk, nn, in[0]->f.data(),
                      in[1]->f.data(), ct[0]->f.data(), g[0]->f.data(),
                      g[1]->f.data(), g.size() > 2 ? g[2]->f.data() : nullptr);
  } else if (isa<EmbeddingOp>(fwd)) {
    k::embeddingBackward(in[0]->numel(), in[1]->shape[0], in[1]->shape[1],
                         in[0]->i.data(), ct[0]->f.data(), g[0]->f.data());
  } else if (isa<CrossEntropyOp>(fwd)) {
    int64_t v = in[0]->shape.back();
    k::crossEntropyBackward(in[0]->numel() / v, v, in[0]->f.data(),
                            in[1]->i.data(), ct[0]->f[0], g[0]->f.data());
  } else if (auto gate = dyn_cast<GateOp>(fwd)) {
    int64_t m = in[0]->shape[2], e = gate.getNumExperts(),
            t = in[0]->numel() / m, kk = gate.getTopK();
    std::vector<float> logits(t * e), dlogits(t * e), w(t * kk);
    std::vector<int64_t> idx(t * kk), counts(e);
    k::linearForward(t, m, e, in[0]->f.data(), in[1]->f.data(),
                     (const float *)nullptr, logits.data());
    k::softmaxTopK(t, e, kk, gate.getNormalize(), logits.data(), idx.data(),
                   w.data(), counts.data());
    k::softmaxTopKBackward(t, e, kk, gate.getNormalize(), logits.data(),
                           idx.data(), ct[0]->f.data(), dlogits.data());
    k::linearBackward(t, m, e, in[0]->f.data(), in[1]->f.data(), dlogits.data(),
                      g[0]->f.data(), g[1]->f.data(), (float *)nullptr);
  } else if (auto x = dyn_cast<ExpertOp>(fwd)) {
    bool gated = x.isGated();
    k::expertBackward(
        k::Activation(int(x.getActivation())), in[0]->shape[0], in[0]->shape[1],
        in[0]->shape[2], in[1]->shape[2], in[0]->f.data(), in[1]->f.data(),
        gated ? in[2]->f.data() : nullptr, in[gated ? 3 : 2]->f.data(),
        ct[0]->f.data(), g[0]->f.data(), g[1]->f.data(),
        gated ? g[2]->f.data() : nullptr, g[gated ? 3 : 2]->f.data());
  } else if (auto x = dyn_cast<SharedExpertOp>(fwd)) {
    bool gated = static_cast<bool>(x.getGateProj());
    int64_t m = in[0]->shape.back();
    k::expertBackward(
        k::Activation(int(x.getActivation())), 1, in[0]->numel() / m, m,
        in[1]->shape[1], in[0]->f.data(), in[1]->f.data(),
        gated ? in[2]->f.data() : nullptr, in[gated ? 3 : 2]->f.data(),
        ct[0]->f.data(), g[0]->f.data(), g[1]->f.data(),
        gated ? g[2]->f.data() : nullptr, g[gated ? 3 : 2]->f.data());
  } else {
    die("moe-run cannot differentiate '" + fwd->getName().getStringRef().str() +
        "'");
  }
}

/// Dispatch / combine (and their vjps): local layout kernels around the
/// runtime's all-to-all, all on the pool's high-priority queue, in order.
void Runner::dispatchOrCombine(Operation *op, moe_rt_stream s, bool backward,
                               ArrayRef<Buffer *> in, ArrayRef<Buffer *> out) {
  auto collective = cast<CollectiveOpInterface>(op);
  moe_rt_comm comm =
      commFor(op, collective.getGridAttr(), collective.getAxes());
  int64_t G = moe_rt_comm_size(comm);
  bool isDispatch = isa<DispatchOp>(op);
  int64_t E = isDispatch ? cast<DispatchOp>(op).getNumExperts()
                         : cast<CombineOp>(op).getNumExperts();
  std::optional<int64_t> cap = isDispatch ? cast<DispatchOp>(op).getCapacity()
                                          : cast<CombineOp>(op).getCapacity();
  if (!cap)
    die("dropless dispatch is not supported by moe-run yet");
  int64_t C = *cap, El = E / G;
  int64_t M = in[0]->shape.back(); // x (dispatch) or the expert outputs
  const Buffer *indices = in[1];
  int64_t kk = indices->shape.back(), T = indices->numel() / kk;
  auto send = std::make_shared<Buffer>(), recv = std::make_shared<Buffer>();
  for (auto b : {send, recv}) {
    b->shape = {E, C, M};
    b->f.assign(E * C * M, 0.0f);
  }
  auto slots = std::make_shared<std::vector<int64_t>>(T * kk);
  auto allToAll = [&](std::shared_ptr<Buffer> from,
                      std::shared_ptr<Buffer> to) {
    moe_rt_tensor a = from->tensor(), b = to->tensor();
    if (moe_rt_all_to_all(s, comm, &a, &b) != MOE_RT_OK)
      die(moe_rt_last_error());
  };
  const int64_t *idx = indices->i.data();
  enqueue(s, false, [=] {
    k::routeTokens(T, E, kk, C, idx, slots->data());
    return 0;
  });
  if (isDispatch && !backward) {
    Buffer *x = in[0], *y = out[0];
    enqueue(s, false, [=] {
      k::dispatchLayout(T, kk, E, C, M, idx, slots->data(), x->f.data(),
                        send->f.data());
      return 0;
    });
    allToAll(send, recv);
    enqueue(s, false, [=] {
      k::toExpertMajor(G, El, C, M, recv->f.data(), y->f.data());
      return 0;
    });
  } else if (isDispatch && backward) {
    // d(result) back to the tokens' ranks, then the layout's adjoint.
    Buffer *dy = in[3], *dx = out[0];
    enqueue(s, false, [=] {
      k::toRankMajor(G, El, C, M, dy->f.data(), send->f.data());
      return 0;
    });
    allToAll(send, recv);
    enqueue(s, false, [=] {
      k::dispatchLayoutBackward(T, kk, C, M, idx, slots->data(), recv->f.data(),
                                dx->f.data());
      return 0;
    });
  } else if (!backward) {
    Buffer *e = in[0], *w = in[2], *y = out[0];
    enqueue(s, false, [=] {
      k::toRankMajor(G, El, C, M, e->f.data(), send->f.data());
      return 0;
    });
    allToAll(send, recv);
    enqueue(s, false, [=] {
      k::combineGather(T, kk, C, M, idx, slots->data(), w->f.data(),
                       recv->f.data(), y->f.data());
      return 0;
    });
  } else {
    // Combine's vjp: bring the expert outputs to the token side again
    // (recomputed rather than kept), then the adjoint of the weighted
    // gather, and its expert-side part back to the experts' ranks.
    Buffer *e = in[0], *w = in[2], *dy = in[4], *de = out[0], *dw = out[1];
    auto drecv = std::make_shared<Buffer>(), dsend = std::make_shared<Buffer>();
    for (auto b : {drecv, dsend}) {
      b->shape = {E, C, M};
      b->f.assign(E * C * M, 0.0f);
    }
    enqueue(s, false, [=] {
      k::toRankMajor(G, El, C, M, e->f.data(), send->f.data());
      return 0;
    });
    allToAll(send, recv);
    enqueue(s, false, [=] {
      std::fill(drecv->f.begin(), drecv->f.end(), 0.0f);
      k::combineGatherBackward(T, kk, C, M, idx, slots->data(), w->f.data(),
                               recv->f.data(), dy->f.data(), drecv->f.data(),
                               dw->f.data());
      return 0;
    });
    allToAll(drecv, dsend);
    enqueue(s, false, [=] {
      std::vector<float> tmp(El * G * C * M);
      k::toExpertMajor(G, El, C, M, dsend->f.data(), tmp.data());
      for (size_t i = 0; i < tmp.size(); ++i)
        de->f[i] += tmp[i];
      return 0;
    });
  }
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
  bool low = StreamOrder::isLowPriority(op);

  if (auto ar = dyn_cast<AllReduceOp>(op)) {
    moe_rt_comm comm = commFor(op, ar.getGridAttr(), ar.getAxes());
    for (auto [src, dst] : llvm::zip(in, out)) {
      enqueue(s, low, [src, dst] {
        dst->f = src->f;
        return 0;
      });
      moe_rt_tensor t = dst->tensor();
      int64_t offset = 0, size = -1;
      if (auto bytes = ar.getBytes()) {
        offset = (*bytes)[0];
        size = (*bytes)[1];
      }
      if (moe_rt_all_reduce(s, comm, &t, offset, size) != MOE_RT_OK)
        die(moe_rt_last_error());
    }
    return;
  }
  if (isa<DispatchOp, CombineOp>(op)) {
    dispatchOrCombine(op, s, false, in, out);
    return;
  }
  if (auto vjp = dyn_cast<VjpOp>(op)) {
    Operation *fwd = vjp.getForwardOp();
    SmallVector<Buffer *> primals(in.begin(),
                                  in.begin() + vjp.getPrimals().size());
    SmallVector<Buffer *> cts(in.begin() + vjp.getPrimals().size(), in.end());
    if (isa<DispatchOp, CombineOp>(fwd)) {
      SmallVector<Buffer *> all(primals);
      all.append(cts.begin(), cts.end());
      enqueue(s, low, [out = SmallVector<Buffer *>(out)] {
        for (Buffer *b : out)
          std::fill(b->f.begin(), b->f.end(), 0.0f);
        return 0;
      });
      dispatchOrCombine(fwd, s, true, all, out);
      return;
    }
    enqueue(s, low,
            [this, fwd, primals, cts, out = SmallVector<Buffer *>(out)] {
              for (Buffer *b : out)
                std::fill(b->f.begin(), b->f.end(), 0.0f);
              computeBackward(fwd, primals, cts, out);
              return 0;
            });
    return;
  }
  if (op->hasTrait<OpTrait::IsTerminator>())
    return;
  enqueue(s, low,
          [this, op, in = SmallVector<Buffer *>(in),
           out = SmallVector<Buffer *>(out)] {
            computeForward(op, in, out);
            return 0;
          });
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
  tasks.clear();
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
  double timeout = 60;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--steps")
      steps = std::atoi(value().c_str());
    else if (a == "--seed")
      seed = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--dump")
      dump = value();
    else if (a == "--dump-inputs")
      dumpInputs = value();
    else if (a == "--timeout")
      timeout = std::atof(value().c_str());
    else if (a == "-h" || a == "--help") {
      std::printf("usage: mpirun -np P moe-run STEP.mlir [--steps N] "
                  "[--seed S] [--dump FILE] [--dump-inputs FILE] [--timeout SECONDS]\n");
      moe_rt_mpi_finalize();
      return 0;
    } else if (!a.empty() && a[0] == '-')
      die("unknown argument '" + a + "'");
    else
      input = a;
  }
  if (input.empty())
    die("no input step (moe-run STEP.mlir)");
  if (steps < 1)
    die("--steps must be positive");

  DialectRegistry registry;
  registry.insert<MoeDialect, arith::ArithDialect, func::FuncDialect,
                  shard::ShardDialect, tensor::TensorDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(input, &context);
  if (!module)
    die("cannot parse '" + input + "'");
  FunctionOpInterface step;
  for (auto f : module->getOps<FunctionOpInterface>())
    if (f->hasAttr(MoeDialect::getScheduleAttrName()))
      step = f;
  if (!step)
    die("'" + input +
        "' has no scheduled step (run moe-opt "
        "--moe-flowmoe-pipeline)");

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
  runner.prepare();
  if (!dumpInputs.empty())
    runner.dumpInputs(dumpInputs + ".rank" + std::to_string(rank));
  for (int s = 1; s <= steps; ++s) {
    runner.run();
    auto res = runner.results();
    // Global mean loss over the data-parallel ranks.
    Buffer &loss = *res[0].second;
    moe_rt_stream sync;
    moe_rt_stream_create_pool(&sync);
    moe_rt_comm all;
    moe_rt_comm_create_world(timeout, 0, &all);
    Buffer total = loss;
    moe_rt_tensor t = total.tensor();
    moe_rt_all_reduce(sync, all, &t, 0, -1);
    if (moe_rt_stream_synchronize(sync, timeout) != MOE_RT_OK)
      die(moe_rt_last_error());
    moe_rt_stream_destroy(sync);
    moe_rt_comm_destroy(all);
    if (rank == 0)
      std::printf("step %d loss %.6f\n", s, total.f[0] / world);
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
