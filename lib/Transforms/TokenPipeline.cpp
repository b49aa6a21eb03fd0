//===- TokenPipeline.cpp - MoE layers in token chunks along the slots -----===//
//
// FSMoE §4 (and PipeMoE/Tutel before it) pipeline the MoE layer, not the
// whole block: the dispatched E_l x (G·C) x M buffer is cut along its
// capacity (token-slot) dimension into r chunks, so chunk j's expert
// computation overlaps chunk j+1's all-to-all. Unlike moe-microbatch the
// cut does not touch B, so any degree up to C works (FlowMoE Table 4's R = 8
// with B = 4 included), and the forward and backward passes may use
// different degrees (FSMoE's r_fwd and r_bwd, Algorithm 1 per phase).
//
// The pass rewrites a training step: each layer's D -> E -> C becomes
// D_j -> E_j -> C_j (j < r_fwd) with y = Σ_j C_j, and the vjps
// C' -> E' -> D' become r_bwd chunks whose primals are cut from the
// forward chunks (moe.slot_window where the windows differ), with the
// weight, routing-weight and input gradients summed over the chunks. Every
// chunk routes with the whole capacity, so the step computes what the
// unchunked one does.
//
// An expert-sharded layer (moe-expert-sharding: D -> AG -> E -> RS -> C,
// backward C' -> AG' -> E' -> RS' -> D') is cut the same way, each chunk
// with its own all-gather and reduce-scatter (FSMoE Fig. 4: chunk j's
// all-gather on the intra-node link overlaps chunk j+1's all-to-all).
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/Tasks.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include <type_traits>

namespace mlir::moe {
#define GEN_PASS_DEF_MOETOKENPIPELINE
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// A window of capacity slots, [first, first + count).
struct Window {
  int64_t first = 0, count = 0;
  int64_t end() const { return first + count; }
  bool operator==(const Window &o) const {
    return first == o.first && count == o.count;
  }
};

/// The r windows of [0, capacity): sizes differ by at most one (so no
/// padding and no other model than the unchunked one).
SmallVector<Window> windowsOf(int64_t r, int64_t capacity) {
  SmallVector<Window> windows;
  for (int64_t j = 0; j < r; ++j) {
    int64_t first = j * capacity / r;
    windows.push_back({first, (j + 1) * capacity / r - first});
  }
  return windows;
}

/// One MoE layer of a training step: D -> E -> C and their vjps, with
/// expert sharding's collectives around the experts where the layer has
/// them (FSMoE Fig. 2): D -> AG -> E -> RS -> C and, in the backward, the
/// adjoints C' -> AG' -> E' -> RS' -> D' (AG' gathers the combine's input
/// gradient, RS' scatters the experts').
struct MoeLayer {
  DispatchOp dispatch;
  ExpertOp expert;
  CombineOp combine;
  VjpOp combineVjp, expertVjp, dispatchVjp;
  Operation *gather = nullptr, *scatter = nullptr;
  Operation *gatherBwd = nullptr, *scatterBwd = nullptr;
  int64_t groups = 1; // source ranks of the dispatched buffer
};

template <class OpT> VjpOp vjpUserOf(Value v) {
  for (Operation *user : v.getUsers())
    if (auto vjp = dyn_cast<VjpOp>(user); vjp && isa<OpT>(vjp.getForwardOp()))
      return vjp;
  return nullptr;
}

template <class OpT> OpT forwardUserOf(Value v) {
  for (Operation *user : v.getUsers())
    if (auto op = dyn_cast<OpT>(user))
      return op;
  return nullptr;
}

/// The op behind `v`'s only use if it is expert sharding's collective of
/// kind `OpT` along the slots (dimension 1), else null.
template <class OpT> Operation *slotCollectiveAfter(Value v) {
  if (!v.hasOneUse())
    return nullptr;
  auto op = dyn_cast<OpT>(*v.getUsers().begin());
  if (!op)
    return nullptr;
  int64_t axis;
  if constexpr (std::is_same_v<OpT, shard::AllGatherOp>)
    axis = op.getGatherAxis().getSExtValue();
  else
    axis = op.getScatterAxis().getSExtValue();
  return axis == 1 ? op.getOperation() : nullptr;
}

/// The only user of `v`, if it has exactly one.
Operation *onlyUser(Value v) {
  return v.hasOneUse() ? *v.getUsers().begin() : nullptr;
}

/// The layer around `d`, or an error naming what does not fit the
/// D -> E -> C shape (D -> AG -> E -> RS -> C sharded) the pass rewrites.
FailureOr<MoeLayer> findLayer(DispatchOp d, int64_t maxDegree) {
  auto fail = [&](Operation *at, const Twine &why) {
    return at->emitOpError() << "moe-token-pipeline: " << why;
  };
  std::optional<int64_t> capacity = d.getCapacity();
  if (!capacity && !d.isVariable())
    return fail(d, "dropless routing without a bound has nothing to chunk: "
                   "give it its variable-count form (moe-variable-dropless) "
                   "or a capacity (moe-bound-dropless)");
  if (cast<ShapedType>(d.getIndices().getType()).getRank() != 3)
    return fail(d, "expert-choice routing (E x C indices) is not chunked "
                   "along its slots; use token-choice routing");
  if (d.getSlots() || d.getPart())
    return fail(d, "is already a token chunk");
  if (capacity && maxDegree > *capacity)
    return fail(d, "degree " + Twine(maxDegree) + " exceeds the capacity C = " +
                       Twine(*capacity) + " (a chunk would hold no slot)");
  if (TaskAttr t = getTask(d); !t || t.getMicro() != 0)
    return fail(d, "token chunks of a micro-batched step are not supported "
                   "(use moe-microbatch degree=1)");
  MoeLayer layer;
  layer.dispatch = d;
  layer.groups =
      capacity ? cast<ShapedType>(d.getResult().getType()).getDimSize(1) /
                     *capacity
               : 1;
  // Expert sharding: the dispatched tokens are all-gathered over the node.
  layer.gather = slotCollectiveAfter<shard::AllGatherOp>(d.getResult());
  if (layer.gather && d.isVariable())
    return fail(d, "expert sharding of a variable-count layer is not "
                   "chunked (its all-gather would need variable counts)");
  if (llvm::any_of(d.getResult().getUsers(),
                   [](Operation *u) { return isa<GatherRowsOp>(u); }))
    return fail(d, "expert sharding of a variable-count layer "
                   "(moe.gather_rows) is not cut into token chunks; run it "
                   "without token-degree / policy=fsmoe, or bound the model "
                   "(moe-bound-dropless) for the padded ESP chunks");
  Value expertIn =
      layer.gather ? layer.gather->getResult(0) : Value(d.getResult());
  layer.expert = forwardUserOf<ExpertOp>(expertIn);
  layer.expertVjp = vjpUserOf<ExpertOp>(expertIn);
  if (!layer.expert || !layer.expertVjp ||
      !llvm::hasNItems(expertIn.getUsers(), 2))
    return fail(d, "the dispatch must feed exactly one moe.expert (and its "
                   "vjp) in a training step, directly or through one "
                   "all-gather along the slots (expert sharding)");
  layer.scatter =
      layer.gather
          ? slotCollectiveAfter<shard::ReduceScatterOp>(layer.expert.getResult())
          : nullptr;
  if (layer.gather && !layer.scatter)
    return fail(layer.expert, "an expert-sharded layer's experts must feed "
                              "exactly one reduce-scatter along the slots");
  Value combineIn =
      layer.scatter ? layer.scatter->getResult(0)
                    : Value(layer.expert.getResult());
  layer.combine = forwardUserOf<CombineOp>(combineIn);
  layer.combineVjp = vjpUserOf<CombineOp>(combineIn);
  if (!layer.combine || !layer.combineVjp ||
      !llvm::hasNItems(combineIn.getUsers(), 2) ||
      layer.combine.getIndices() != d.getIndices())
    return fail(layer.expert, "the expert must feed exactly one moe.combine "
                              "of the dispatch's routing (and its vjp)");
  // Backward: C' -> [AG'] -> E' -> [RS'] -> D', each value used once. In a
  // sharded layer `v` must feed one collective of kind OpT (kept in
  // `slot`), and the chain goes on from its result.
  auto through = [&](auto *kind, Value &v, Operation *&slot, Operation *at,
                     StringRef what) -> LogicalResult {
    using OpT = std::remove_pointer_t<decltype(kind)>;
    if (!layer.gather)
      return success();
    if (!(slot = slotCollectiveAfter<OpT>(v)))
      return fail(at, what);
    v = slot->getResult(0);
    return success();
  };
  Value ct = layer.combineVjp.getResult(0);
  if (failed(through(static_cast<shard::AllGatherOp *>(nullptr), ct,
                     layer.gatherBwd, layer.combineVjp,
                     "the combine's input gradient must feed only one "
                     "all-gather (the reduce-scatter's adjoint)")))
    return failure();
  if (onlyUser(ct) != layer.expertVjp.getOperation())
    return fail(layer.combineVjp, "the combine's input gradient must feed "
                                  "only the expert's vjp");
  Value dInput = layer.expertVjp.getResult(0);
  if (failed(through(static_cast<shard::ReduceScatterOp *>(nullptr), dInput,
                     layer.scatterBwd, layer.expertVjp,
                     "the experts' input gradient must feed only one "
                     "reduce-scatter (the all-gather's adjoint)")))
    return failure();
  layer.dispatchVjp = dyn_cast_or_null<VjpOp>(onlyUser(dInput));
  if (!layer.dispatchVjp ||
      layer.dispatchVjp.getForwardOp()->getName() != d->getName())
    return fail(layer.expertVjp, "the expert's input gradient must feed only "
                                 "the dispatch's vjp");
  // A variable-count layer's `rows` are replaced by each chunk's: only the
  // layer's own ops may read them.
  if (d.isVariable())
    for (Operation *user : d.getRows().getUsers())
      if (!llvm::is_contained(
              {layer.expert.getOperation(), layer.combine.getOperation(),
               layer.expertVjp.getOperation(), layer.combineVjp.getOperation()},
              user))
        return fail(user, "reads a chunked dispatch's rows; only the layer's "
                          "expert and combine (and their vjps) may");
  return layer;
}

TaskAttr chunkTask(TaskAttr t, int64_t micro) {
  return TaskAttr::get(t.getContext(), t.getKind(), t.getPhase(), t.getBlock(),
                       micro, t.getChunk());
}

/// Gives a dispatch or combine the slots of `w` (nothing for the whole
/// capacity), retyping a dispatch's, expert's or sharding collective's
/// result: each holds groups x count slots, a collective as many groups as
/// before (a node's ranks' after an all-gather).
void restrictToWindow(Operation *op, Window w, int64_t groups,
                      int64_t capacity) {
  Builder b(op->getContext());
  bool whole = w.count == capacity;
  if (auto d = dyn_cast<DispatchOp>(op)) {
    if (!whole)
      d.setSlotsAttr(b.getDenseI64ArrayAttr({w.first, w.count}));
    d.getResult().setType(withDim(d.getResult().getType(), 1, groups * w.count));
  } else if (auto c = dyn_cast<CombineOp>(op)) {
    if (!whole)
      c.setSlotsAttr(b.getDenseI64ArrayAttr({w.first, w.count}));
  } else if (auto e = dyn_cast<ExpertOp>(op)) {
    e.getResult().setType(e.getInput().getType());
  } else if (isa<shard::AllGatherOp, shard::ReduceScatterOp>(op)) {
    Value r = op->getResult(0);
    int64_t slots = cast<ShapedType>(r.getType()).getDimSize(1);
    r.setType(withDim(r.getType(), 1, slots / capacity * w.count));
  }
}

/// Source groups of a whole-capacity E_l x (groups·C) x M buffer.
int64_t slotGroups(Value v, int64_t capacity) {
  return cast<ShapedType>(v.getType()).getDimSize(1) / capacity;
}

/// a_0 + a_1 + ... as arith.addf, labelled `task`.
Value sum(OpBuilder &b, Location loc, ArrayRef<Value> parts, TaskAttr task) {
  Value acc = parts.front();
  for (Value part : parts.drop_front()) {
    auto add = arith::AddFOp::create(b, loc, acc, part);
    setTask(add, task);
    acc = add;
  }
  return acc;
}

/// Results `firstResult`.. of the whole-layer vjp `old` replaced by the sum
/// over its chunks' (gradients leaving the layer: routing weights, expert
/// weights, the layer's input), labelled as chunk 0, the backward's last,
/// after which the sum is complete.
void replaceChunkSums(OpBuilder &b, VjpOp old, ArrayRef<VjpOp> chunks,
                      unsigned firstResult) {
  b.setInsertionPoint(old);
  for (unsigned k = firstResult; k < old.getNumResults(); ++k) {
    SmallVector<Value> parts;
    for (VjpOp c : chunks)
      parts.push_back(c.getResult(k));
    old.getResult(k).replaceAllUsesWith(
        sum(b, old.getLoc(), parts, chunkTask(getTask(old), 0)));
  }
}

struct TokenPipelinePass
    : public moe::impl::MoeTokenPipelineBase<TokenPipelinePass> {
  using MoeTokenPipelineBase::MoeTokenPipelineBase;

  int64_t rFwd() const { return degree; }
  int64_t rBwd() const { return degreeBwd > 0 ? degreeBwd : degree; }

  /// The forward chunks of `layer`: D_j, [AG_j,] E_j, [RS_j,] C_j per
  /// window, then y = Σ C_j in place of the combine's result. `inChunks`
  /// and `outChunks` get what each chunk's experts read and its combine
  /// reads (the primals the backward cuts its windows from).
  void chunkForward(MoeLayer &layer, ArrayRef<Window> windows, int64_t capacity,
                    SmallVector<Value> &inChunks,
                    SmallVector<Value> &outChunks) {
    OpBuilder b(layer.dispatch);
    SmallVector<Value> cChunks;
    SmallVector<Operation *> chain = {layer.dispatch, layer.gather,
                                      layer.expert, layer.scatter,
                                      layer.combine};
    llvm::erase(chain, nullptr);
    for (auto [j, w] : llvm::enumerate(windows)) {
      IRMapping map;
      for (Operation *op : chain) {
        b.setInsertionPoint(op);
        Operation *chunk = b.clone(*op, map);
        restrictToWindow(chunk, w, layer.groups, capacity);
        setTask(chunk, chunkTask(getTask(chunk), j));
      }
      inChunks.push_back(map.lookup(layer.expert.getInput()));
      outChunks.push_back(map.lookup(layer.combine.getInput()));
      cChunks.push_back(map.lookup(layer.combine.getResult()));
    }
    // The sum waits for the last chunk: it belongs to what uses the
    // combined output (the residual add of the next task).
    TaskAttr task = chunkTask(getTask(layer.combine), windows.size() - 1);
    for (Operation *user : layer.combine->getUsers())
      if (TaskAttr t = getTask(user)) {
        task = t;
        break;
      }
    b.setInsertionPoint(layer.combine);
    layer.combine.getResult().replaceAllUsesWith(
        sum(b, layer.combine.getLoc(), cChunks, task));
  }

  /// Window `w` of the forward chunks `chunks` (cut at `fwd`).
  Value cut(OpBuilder &b, Location loc, ArrayRef<Value> chunks,
            ArrayRef<Window> fwd, Window w, int64_t groups, TaskAttr task) {
    SmallVector<Value> inputs;
    int64_t from = -1;
    for (auto [chunk, fw] : llvm::zip(chunks, fwd)) {
      if (fw == w)
        return chunk;
      if (fw.end() <= w.first || fw.first >= w.end())
        continue;
      if (from < 0)
        from = fw.first;
      inputs.push_back(chunk);
    }
    auto type = withDim(chunks.front().getType(), 1, groups * w.count);
    auto op = SlotWindowOp::create(
        b, loc, type, inputs, b.getI64IntegerAttr(groups),
        b.getI64IntegerAttr(from), b.getDenseI64ArrayAttr({w.first, w.count}));
    setTask(op, task);
    return op;
  }

  /// A vjp of `old`'s forward op restricted to window `w`, on `primals`.
  VjpOp chunkVjp(OpBuilder &b, VjpOp old, ArrayRef<Value> primals,
                 Value cotangent, Window w, const MoeLayer &layer,
                 int64_t capacity, TaskAttr task) {
    return chunkVjpWith(b, old, primals, cotangent, task, [&](Operation *op) {
      restrictToWindow(op, w, layer.groups, capacity);
    });
  }

  /// A vjp of `old`'s forward op on `primals`, its copy of the forward op
  /// made a chunk by `restrict`.
  VjpOp chunkVjpWith(OpBuilder &b, VjpOp old, ArrayRef<Value> primals,
                     Value cotangent, TaskAttr task,
                     llvm::function_ref<void(Operation *)> restrict) {
    SmallVector<Type> gradTypes;
    for (Value p : primals)
      if (auto t = dyn_cast<ShapedType>(p.getType());
          t && isa<FloatType>(t.getElementType()))
        gradTypes.push_back(t);
    auto vjp = VjpOp::create(b, old.getLoc(), gradTypes, primals,
                             ValueRange{cotangent});
    setTask(vjp, task);
    Block *body = new Block();
    vjp.getBody().push_back(body);
    IRMapping map;
    for (auto [arg, p] : llvm::zip(old.getBody().front().getArguments(),
                                   primals))
      map.map(arg, body->addArgument(p.getType(), p.getLoc()));
    // Primals beyond the old vjp's (a chunk's exchanged counts): new
    // arguments, which `restrict` wires into the copy.
    for (Value p :
         primals.drop_front(old.getBody().front().getNumArguments()))
      body->addArgument(p.getType(), p.getLoc());
    OpBuilder inner = OpBuilder::atBlockEnd(body);
    Operation *copy = inner.clone(*old.getForwardOp(), map);
    restrict(copy);
    YieldOp::create(inner, old.getLoc(), copy->getResults());
    return vjp;
  }

  /// The backward chunks of `layer` at `windows`: C'_i, [AG'_i,] E'_i,
  /// [RS'_i,] D'_i, their gradients summed in place of the old vjps'
  /// results. Their primals are window i of the forward chunks' `inChunks`
  /// / `outChunks` (cut at `fwd`).
  void chunkBackward(MoeLayer &layer, ArrayRef<Window> windows,
                     ArrayRef<Window> fwd, int64_t capacity,
                     ArrayRef<Value> inChunks, ArrayRef<Value> outChunks) {
    OpBuilder b(layer.combineVjp);
    Value dy = layer.combineVjp.getCotangents()[0];
    int64_t inGroups = slotGroups(layer.expert.getInput(), capacity),
            outGroups = slotGroups(layer.combine.getInput(), capacity);
    // Expert sharding's backward collective `old` on chunk i's `input`.
    auto collective = [&](Operation *old, Value input, Window w,
                          size_t i) -> Value {
      if (!old)
        return input;
      b.setInsertionPoint(old);
      IRMapping map;
      map.map(old->getOperand(0), input);
      Operation *chunk = b.clone(*old, map);
      restrictToWindow(chunk, w, layer.groups, capacity);
      setTask(chunk, chunkTask(getTask(old), i));
      return chunk->getResult(0);
    };
    SmallVector<VjpOp> cVjps, eVjps, dVjps;
    for (auto [i, w] : llvm::enumerate(windows)) {
      TaskAttr cTask = chunkTask(getTask(layer.combineVjp), i),
               eTask = chunkTask(getTask(layer.expertVjp), i),
               dTask = chunkTask(getTask(layer.dispatchVjp), i);
      b.setInsertionPoint(layer.combineVjp);
      SmallVector<Value> primals(layer.combineVjp.getPrimals());
      primals[0] = cut(b, layer.combine.getLoc(), outChunks, fwd, w,
                       outGroups, cTask);
      cVjps.push_back(chunkVjp(b, layer.combineVjp, primals, dy, w, layer,
                               capacity, cTask));
      Value dExpertOut =
          collective(layer.gatherBwd, cVjps.back().getResult(0), w, i);
      b.setInsertionPoint(layer.expertVjp);
      primals.assign(layer.expertVjp.getPrimals().begin(),
                     layer.expertVjp.getPrimals().end());
      primals[0] = cut(b, layer.expert.getLoc(), inChunks, fwd, w, inGroups,
                       eTask);
      eVjps.push_back(chunkVjp(b, layer.expertVjp, primals, dExpertOut, w,
                               layer, capacity, eTask));
      Value dDispatched =
          collective(layer.scatterBwd, eVjps.back().getResult(0), w, i);
      b.setInsertionPoint(layer.dispatchVjp);
      primals.assign(layer.dispatchVjp.getPrimals().begin(),
                     layer.dispatchVjp.getPrimals().end());
      dVjps.push_back(chunkVjp(b, layer.dispatchVjp, primals, dDispatched, w,
                               layer, capacity, dTask));
    }
    replaceChunkSums(b, layer.combineVjp, cVjps, 1);
    replaceChunkSums(b, layer.expertVjp, eVjps, 1);
    replaceChunkSums(b, layer.dispatchVjp, dVjps, 0);
  }

  /// The counts exchange of variable-count dispatch `d` (moe.exchange_counts
  /// of its indices over its group: G x E), before it, in its task.
  Value exchangeCounts(OpBuilder &b, DispatchOp d) {
    auto rows = cast<RankedTensorType>(d.getRows().getType());
    auto type = RankedTensorType::get(
        {rows.getDimSize(1), static_cast<int64_t>(d.getNumExperts())},
        rows.getElementType());
    auto op = ExchangeCountsOp::create(b, d.getLoc(), type, d.getIndices(),
                                       d.getGridAttr(), d.getAxesAttr(),
                                       d.getNumExpertsAttr());
    setTask(op, getTask(d));
    return op.getResult();
  }

  /// A variable-count layer (no capacity: the rows each rank sends each
  /// expert are data) in token chunks: D_j -> E_j -> C_j with `part [j,
  /// r_fwd]` on dispatch and combine, y = Σ_j C_j; the backward's chunks
  /// C'_i -> E'_i -> D'_i with `part [i, r_bwd]`, their primals the forward
  /// chunks' (moe.rows_window re-cuts them when r_bwd ≠ r_fwd).
  void chunkVariable(MoeLayer &layer, int64_t rf, int64_t rb) {
    MLIRContext *ctx = layer.dispatch.getContext();
    auto partOf = [&](int64_t j, int64_t r) {
      return DenseI64ArrayAttr::get(ctx, {j, r});
    };
    auto setPart = [&](Operation *op, DenseI64ArrayAttr part) {
      if (auto d = dyn_cast<DispatchOp>(op))
        d.setPartAttr(part);
      else if (auto c = dyn_cast<CombineOp>(op))
        c.setPartAttr(part);
    };
    // One counts exchange for the layer: every chunk, forward and
    // backward, reads its sizes from it (`all_counts`) instead of
    // all-gathering the counts again. It belongs to the first dispatch's
    // task (D_1), whose stream it shares.
    OpBuilder b(layer.dispatch);
    Value counts = sharedCounts ? exchangeCounts(b, layer.dispatch) : Value();
    auto withCounts = [&](Operation *op, Value c) {
      if (auto d = dyn_cast<DispatchOp>(op); d && c)
        d.getAllCountsMutable().assign(c);
    };
    // Forward: each chunk routes the whole batch and moves its part.
    SmallVector<Value> inChunks, outChunks, rowsChunks, cChunks;
    for (int64_t j = 0; j < rf; ++j) {
      IRMapping map;
      for (Operation *op : {layer.dispatch.getOperation(),
                            layer.expert.getOperation(),
                            layer.combine.getOperation()}) {
        b.setInsertionPoint(op);
        Operation *chunk = b.clone(*op, map);
        setPart(chunk, partOf(j, rf));
        withCounts(chunk, counts);
        setTask(chunk, chunkTask(getTask(chunk), j));
      }
      inChunks.push_back(map.lookup(layer.dispatch.getResult()));
      rowsChunks.push_back(map.lookup(layer.dispatch.getRows()));
      outChunks.push_back(map.lookup(layer.expert.getResult()));
      cChunks.push_back(map.lookup(layer.combine.getResult()));
    }
    TaskAttr sumTask = chunkTask(getTask(layer.combine), rf - 1);
    for (Operation *user : layer.combine->getUsers())
      if (TaskAttr t = getTask(user)) {
        sumTask = t;
        break;
      }
    b.setInsertionPoint(layer.combine);
    layer.combine.getResult().replaceAllUsesWith(
        sum(b, layer.combine.getLoc(), cChunks, sumTask));

    // Backward chunk i's expert input / output and rows: the forward
    // chunk's, or re-cut from all of them.
    Value rows = layer.dispatch.getRows();
    auto window = [&](ArrayRef<Value> chunks, int64_t i, TaskAttr task,
                      Location loc) -> std::pair<Value, Value> {
      if (rb == rf)
        return {chunks[i], rowsChunks[i]};
      auto op = RowsWindowOp::create(b, loc, chunks.front().getType(),
                                     rows.getType(), chunks, rowsChunks,
                                     partOf(i, rb));
      setTask(op, task);
      return {op.getResult(), op.getRows()};
    };
    auto withRows = [&](VjpOp old, Value first, Value chunkRows) {
      SmallVector<Value> primals(old.getPrimals());
      primals[0] = first;
      for (Value &p : primals)
        if (p == rows)
          p = chunkRows;
      return primals;
    };
    SmallVector<VjpOp> cVjps, eVjps, dVjps;
    Value dy = layer.combineVjp.getCotangents()[0];
    for (int64_t i = 0; i < rb; ++i) {
      TaskAttr cTask = chunkTask(getTask(layer.combineVjp), i),
               eTask = chunkTask(getTask(layer.expertVjp), i),
               dTask = chunkTask(getTask(layer.dispatchVjp), i);
      auto part = partOf(i, rb);
      auto restrict = [&](Operation *op) { setPart(op, part); };
      b.setInsertionPoint(layer.combineVjp);
      auto [out, outRows] =
          window(outChunks, i, cTask, layer.combineVjp.getLoc());
      cVjps.push_back(chunkVjpWith(b, layer.combineVjp,
                                   withRows(layer.combineVjp, out, outRows), dy,
                                   cTask, restrict));
      b.setInsertionPoint(layer.expertVjp);
      auto [in, inRows] = window(inChunks, i, eTask, layer.expertVjp.getLoc());
      eVjps.push_back(chunkVjpWith(b, layer.expertVjp,
                                   withRows(layer.expertVjp, in, inRows),
                                   cVjps.back().getResult(0), eTask, restrict));
      b.setInsertionPoint(layer.dispatchVjp);
      SmallVector<Value> primals(layer.dispatchVjp.getPrimals());
      if (counts)
        primals.push_back(counts); // the vjp's last argument
      dVjps.push_back(chunkVjpWith(
          b, layer.dispatchVjp, primals, eVjps.back().getResult(0), dTask,
          [&](Operation *op) {
            restrict(op);
            if (counts)
              withCounts(op, op->getBlock()->getArguments().back());
          }));
    }
    replaceChunkSums(b, layer.combineVjp, cVjps, 1);
    replaceChunkSums(b, layer.expertVjp, eVjps, 1);
    replaceChunkSums(b, layer.dispatchVjp, dVjps, 0);
  }

  /// The layer's [r_fwd, r_bwd]: its own (moe.token_degree, set by
  /// moe-fsmoe-plan per layer) or the pass options.
  FailureOr<std::pair<int64_t, int64_t>> degreesOf(DispatchOp d) const {
    auto own = d->getAttrOfType<DenseI64ArrayAttr>(MoeDialect::getTokenDegreeAttrName());
    if (!own)
      return std::make_pair(rFwd(), rBwd());
    if (own.size() != 2 || own[0] < 1 || own[1] < 1)
      return d.emitOpError()
             << "moe-token-pipeline: " << MoeDialect::getTokenDegreeAttrName()
             << " must be [r_fwd, r_bwd], both >= 1";
    return std::make_pair(own[0], own[1]);
  }

  LogicalResult chunkStep(FunctionOpInterface func) {
    if (func->hasAttr(MoeDialect::getScheduleAttrName()))
      return mlir::emitError(func.getLoc())
             << "moe-token-pipeline: the step is already scheduled (run it "
                "before moe-schedule)";
    SmallVector<DispatchOp> dispatches;
    func->walk([&](DispatchOp d) {
      if (!d->getParentOfType<VjpOp>())
        dispatches.push_back(d);
    });
    if (!llvm::any_of(func.getFunctionBody().front(),
                      [](Operation &op) { return isa<VjpOp>(op); }))
      return mlir::emitError(func.getLoc())
             << "moe-token-pipeline: not a training step (run "
                "moe-build-train-step first)";
    for (DispatchOp d : dispatches) {
      FailureOr<std::pair<int64_t, int64_t>> degrees = degreesOf(d);
      if (failed(degrees))
        return failure();
      auto [rf, rb] = *degrees;
      if (rf == 1 && rb == 1)
        continue;
      FailureOr<MoeLayer> layer = findLayer(d, std::max(rf, rb));
      if (failed(layer))
        return failure();
      if (d.isVariable()) {
        chunkVariable(*layer, rf, rb);
      } else {
        int64_t capacity = *d.getCapacity();
        SmallVector<Window> fwd = windowsOf(rf, capacity),
                            bwd = windowsOf(rb, capacity);
        SmallVector<Value> inChunks, outChunks;
        chunkForward(*layer, fwd, capacity, inChunks, outChunks);
        chunkBackward(*layer, bwd, fwd, capacity, inChunks, outChunks);
      }
      // The whole layer, users before what they use.
      for (Operation *op :
           {layer->dispatchVjp.getOperation(), layer->scatterBwd,
            layer->expertVjp.getOperation(), layer->gatherBwd,
            layer->combineVjp.getOperation(), layer->combine.getOperation(),
            layer->scatter, layer->expert.getOperation(), layer->gather,
            layer->dispatch.getOperation()})
        if (op)
          op->erase();
    }
    return success();
  }

  void runOnOperation() override {
    if (degree < 1 || degreeBwd < 0) {
      mlir::emitError(getOperation().getLoc())
          << "moe-token-pipeline: degree must be >= 1 and degree-bwd >= 0, "
             "got "
          << static_cast<int64_t>(degree) << " and "
          << static_cast<int64_t>(degreeBwd);
      return signalPassFailure();
    }
    FailureOr<SmallVector<FunctionOpInterface>> funcs =
        functionsWith(getOperation(), MoeDialect::getModelAttrName(),
                      "moe-token-pipeline", "no function has a moe.model");
    if (failed(funcs))
      return signalPassFailure();
    bool perLayer = false;
    getOperation()->walk(
        [&](DispatchOp d) { perLayer |= d->hasAttr(MoeDialect::getTokenDegreeAttrName()); });
    if (rFwd() == 1 && rBwd() == 1 && !perLayer)
      return;
    for (FunctionOpInterface func : *funcs)
      if (failed(chunkStep(func)))
        return signalPassFailure();
  }
};

} // namespace
