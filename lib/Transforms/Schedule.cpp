//===- Schedule.cpp - order a step's tasks by a scheduling policy ---------===//
//
// FlowMoE §3.2 (Eqs. 2–5) and §3.3 (Theorem 1), and the baselines it is
// measured against (Fig. 2, Table 5): every policy is a priority on task
// labels, applied as a topological order so that the result stays valid SSA,
// plus the few event barriers a policy needs to forbid overlap.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/StreamOrder.h"
#include "moe/Analysis/Tasks.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include <queue>
#include <tuple>

namespace mlir::moe {
#define GEN_PASS_DEF_MOESCHEDULE
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

enum class Policy { Vanilla, PipeMoe, FlowMoeAT, FlowMoe, CentralizedAR, Fsmoe };

std::optional<Policy> parsePolicy(StringRef name) {
  return llvm::StringSwitch<std::optional<Policy>>(name)
      .Case("vanilla", Policy::Vanilla)
      .Case("pipe-moe", Policy::PipeMoe)
      .Case("flowmoe-at", Policy::FlowMoeAT)
      .Case("flowmoe", Policy::FlowMoe)
      .Case("centralized-ar", Policy::CentralizedAR)
      .Case("fsmoe", Policy::Fsmoe)
      .Default(std::nullopt);
}

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;

/// Issue priority of a task: (phase, block position, kind rank, micro-batch
/// position), smaller first.
Key keyOf(TaskAttr t, Policy policy, int64_t L, int64_t R) {
  bool fwd = t.getPhase() == Phase::fwd;
  int64_t l = t.getBlock(), r = t.getMicro();
  switch (t.getKind()) {
  case TaskKind::PRE:
    return fwd ? Key{0, -1, 0, r} : Key{1, L, 0, r};
  case TaskKind::HEAD:
    return fwd ? Key{0, L, 0, r} : Key{1, -1, 0, R - 1 - r};
  case TaskKind::OPT:
    return Key{3, 0, 0, 0};
  case TaskKind::AR: {
    // AR^(l) of the weights outside blocks (l = -1) completes with PRE'.
    // (FSMoE's windowed slices: fsmoeSliceKey.)
    int64_t position = l < 0 ? L : L - 1 - l;
    if (policy == Policy::FlowMoe)
      return Key{1, position, 2, t.getChunk()};
    return Key{2, position, 0, t.getChunk()};
  }
  case TaskKind::AT:
  case TaskKind::D:
  case TaskKind::E:
  case TaskKind::C:
    break;
  }
  if (policy == Policy::PipeMoe || policy == Policy::Fsmoe) {
    // Tutel / ScheMoE (and FSMoE, which pipelines the MoE layer only): all of a block's AT before its first D (forward),
    // all of its D' before its first AT' (backward).
    TaskKind k = t.getKind();
    if (fwd)
      return Key{0, l, k == TaskKind::AT ? 0 : k == TaskKind::D ? 1 : 2, r};
    return Key{1, L - 1 - l,
               k == TaskKind::AT  ? 2
               : k == TaskKind::D ? 1
                                  : 0,
               R - 1 - r};
  }
  // Eqs. 2-3 (forward): AT, D before E, C; Eqs. 4-5 (backward): E, C
  // before AT, D, micro-batches in reverse.
  bool first = t.getKind() == TaskKind::AT || t.getKind() == TaskKind::D;
  if (fwd)
    return Key{0, l, first ? 0 : 1, r};
  return Key{1, L - 1 - l, first ? 1 : 0, R - 1 - r};
}

/// FSMoE §4-5: a gradient slice planned into block w's MoE window goes
/// after the layer's backward combines C' (FSMoE's FIFO: C'_1..C'_r, GAR,
/// D'_1..D'_r), one planned into its dense window after its D'; the
/// barriers in fsmoeWindowBarriers make the placement binding.
std::optional<Key> fsmoeSliceKey(Operation *op, int64_t L, int64_t R) {
  auto window = op->getAttrOfType<TaskAttr>(MoeDialect::getGradientWindowAttrName());
  TaskAttr t = getTask(op);
  if (!window || !t)
    return std::nullopt;
  bool dense = window.getKind() == TaskKind::AT;
  return Key{1, L - 1 - window.getBlock(), dense ? 1 : 0, R + t.getChunk()};
}

/// FSMoE's two links: a collective whose group stays inside a node (no
/// axis 0 of a 2-D grid, axis 0 being nodes as in the cost model) goes on
/// the intra-node communication stream `<comm, 1>`.
bool isIntraNode(Operation *op) {
  std::optional<CollectiveKey> key = getCollectiveKey(op);
  if (!key)
    return false;
  auto grid = SymbolTable::lookupNearestSymbolFrom<shard::GridOp>(op, key->grid);
  return grid && grid.getShape().size() >= 2 && grid.getShape()[0] > 1 &&
         !llvm::is_contained(key->axes, 0);
}

/// Expert sharding's all-gather / reduce-scatter group a node's ranks by
/// construction (moe-expert-sharding): the intra-node stream under every
/// policy, so that they never queue behind the inter-node all-to-alls.
bool isShardingCollective(Operation *op) {
  // (The variable-count forms have vjps, which run on the same stream.)
  if (auto vjp = dyn_cast<VjpOp>(op))
    op = vjp.getForwardOp();
  return op && isa<shard::AllGatherOp, shard::ReduceScatterOp, GatherRowsOp,
                   ScatterRowsOp>(op);
}

struct SchedulePass : public moe::impl::MoeScheduleBase<SchedulePass> {
  using MoeScheduleBase::MoeScheduleBase;

  LogicalResult schedule(FunctionOpInterface func, ModelAttr model,
                         Policy policy) {
    MLIRContext *ctx = &getContext();
    Block &entry = func.getFunctionBody().front();
    int64_t R = 1;
    bool labelled = false;
    for (Operation &op : entry) {
      if (isa<RecordEventOp, WaitEventOp>(op))
        return op.emitOpError() << "is already a sync: run moe-schedule "
                                   "before moe-insert-syncs";
      if (TaskAttr t = getTask(&op)) {
        labelled = true;
        R = std::max(R, t.getMicro() + 1);
        if (t.getPhase() == Phase::bwd && t.getKind() == TaskKind::AR &&
            t.getChunk() >= 0 && policy != Policy::Fsmoe)
          return op.emitOpError() << "is already a chunk: run moe-schedule "
                                     "before moe-chunk-gradients";
      }
    }
    if (!labelled ||
        !llvm::any_of(entry, [](Operation &op) { return isa<VjpOp>(op); }))
      return mlir::emitError(func.getLoc())
             << "moe-schedule: not a training step (run "
                "moe-build-train-step first)";
    if (policy == Policy::Vanilla && R != 1)
      return mlir::emitError(func.getLoc())
             << "moe-schedule: policy vanilla is vanillaEP without "
                "pipelining; the step has "
             << R << " micro-batches (use moe-microbatch degree=1)";

    // Kahn's algorithm, ready ops by (key, original position).
    Operation *terminator = entry.getTerminator();
    SmallVector<Operation *> ops;
    DenseMap<Operation *, unsigned> index;
    for (Operation &op : entry.without_terminator()) {
      index[&op] = ops.size();
      ops.push_back(&op);
    }
    std::vector<unsigned> pending(ops.size(), 0);
    std::vector<SmallVector<unsigned>> users(ops.size());
    for (auto [i, op] : llvm::enumerate(ops)) {
      llvm::SmallDenseSet<unsigned> deps;
      op->walk([&](Operation *nested) {
        for (Value v : nested->getOperands())
          if (Operation *def = v.getDefiningOp();
              def && def->getBlock() == &entry && def != op)
            deps.insert(index.lookup(def));
      });
      pending[i] = deps.size();
      for (unsigned d : deps)
        users[d].push_back(i);
    }
    int64_t L = model.getLayers();
    auto keyAt = [&](unsigned i) {
      TaskAttr t = getTask(ops[i]);
      std::optional<Key> slice;
      if (policy == Policy::Fsmoe)
        slice = fsmoeSliceKey(ops[i], L, R);
      Key k = slice ? *slice : t ? keyOf(t, policy, L, R) : Key{-1, 0, 0, 0};
      return std::make_pair(k, i);
    };
    using Item = std::pair<Key, unsigned>;
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
    for (unsigned i = 0; i < ops.size(); ++i)
      if (!pending[i])
        ready.push(keyAt(i));
    SmallVector<Operation *> order;
    while (!ready.empty()) {
      unsigned i = ready.top().second;
      ready.pop();
      order.push_back(ops[i]);
      for (unsigned u : users[i])
        if (--pending[u] == 0)
          ready.push(keyAt(u));
    }
    if (order.size() != ops.size())
      return mlir::emitError(func.getLoc())
             << "moe-schedule: the step has a dependency "
                "cycle";
    for (Operation *op : order)
      op->moveBefore(terminator);

    StreamAttr compute = StreamAttr::get(ctx, StreamKind::compute, 0);
    StreamAttr comm = StreamAttr::get(ctx, StreamKind::comm, 0);
    StreamAttr intra = StreamAttr::get(ctx, StreamKind::comm, 1);
    // Host planners solve on a host thread, off both streams; events start
    // and join them like any cross-stream use (docs/host-planners.md).
    StreamAttr host = StreamAttr::get(ctx, StreamKind::host, 0);
    for (Operation *op : order)
      if (!op->hasTrait<OpTrait::ConstantLike>())
        op->setAttr(MoeDialect::getStreamAttrName(),
                    isHostPlanner(op)            ? host
                    : !isCommunicationTask(op) ? compute
                    : isShardingCollective(op) ||
                            (policy == Policy::Fsmoe && isIntraNode(op))
                        ? intra
                        : comm);

    if (policy == Policy::PipeMoe || policy == Policy::Fsmoe)
      insertPipeMoeBarriers(entry, L, R, compute, comm);
    if (policy == Policy::Fsmoe) {
      if (failed(insertFsmoeWindowBarriers(entry, L, compute, comm)))
        return failure();
    } else if (policy != Policy::FlowMoe) {
      insertCentralizedARBarrier(entry, compute, comm);
    }
    if (policy == Policy::Vanilla)
      insertVanillaBarrier(entry, compute, comm);
    func->setAttr(MoeDialect::getScheduleAttrName(),
                  StringAttr::get(ctx, this->policy));
    return success();
  }

  /// Ops matching `before` that come after the last op matching `after` do
  /// not start before it completes. A `before` op the ready-list order put
  /// earlier does not depend on the `after` side at all (e.g. the vjp of a
  /// DeepSeek shared expert, labelled AT, is ready long before the block's
  /// dispatch-adjoints) and is left to overlap, as it would on hardware.
  void barrier(Block &entry, function_ref<bool(TaskAttr)> after,
               function_ref<bool(TaskAttr)> before, StreamAttr from,
               StreamAttr to) {
    barrierOps(
        entry,
        [&](Operation *op) {
          TaskAttr t = getTask(op);
          return t && after(t);
        },
        [&](Operation *op) {
          TaskAttr t = getTask(op);
          return t && before(t);
        },
        from, to);
  }

  void barrierOps(Block &entry, function_ref<bool(Operation *)> after,
                  function_ref<bool(Operation *)> before, StreamAttr from,
                  StreamAttr to) {
    Operation *last = nullptr;
    for (Operation &op : entry)
      if (after(&op))
        last = &op;
    if (!last)
      return;
    Operation *first = nullptr;
    for (Operation *op = last->getNextNode(); op && !first;
         op = op->getNextNode())
      if (before(op))
        first = op;
    if (!first)
      return;
    // A communication op on the intra-node stream (expert sharding's
    // collectives) records / waits there rather than on <comm>.
    auto streamOf = [](Operation *op, StreamAttr cls) {
      auto s = op->getAttrOfType<StreamAttr>(MoeDialect::getStreamAttrName());
      return s && cls.getKind() == StreamKind::comm &&
                     s.getKind() == StreamKind::comm
                 ? s
                 : cls;
    };
    from = streamOf(last, from);
    to = streamOf(first, to);
    OpBuilder builder(last->getContext());
    builder.setInsertionPointAfter(last);
    auto record = RecordEventOp::create(builder, last->getLoc(), from);
    builder.setInsertionPoint(first);
    WaitEventOp::create(builder, first->getLoc(), record.getEvent(), to);
  }

  /// Tutel / ScheMoE pipeline only the MoE layer: the MHA + gate of a block
  /// finishes for the whole batch before its first dispatch (forward), and
  /// starts only after its last dispatch-adjoint (backward).
  void insertPipeMoeBarriers(Block &entry, int64_t L, int64_t R,
                             StreamAttr compute, StreamAttr comm) {
    for (int64_t l = 0; l < L; ++l) {
      barrier(
          entry,
          [&](TaskAttr t) {
            return t.getKind() == TaskKind::AT && t.getPhase() == Phase::fwd &&
                   t.getBlock() == l;
          },
          [&](TaskAttr t) {
            return t.getKind() == TaskKind::D && t.getPhase() == Phase::fwd &&
                   t.getBlock() == l;
          },
          compute, comm);
      barrier(
          entry,
          [&](TaskAttr t) {
            return t.getKind() == TaskKind::D && t.getPhase() == Phase::bwd &&
                   t.getBlock() == l;
          },
          [&](TaskAttr t) {
            return t.getKind() == TaskKind::AT && t.getPhase() == Phase::bwd &&
                   t.getBlock() == l;
          },
          comm, compute);
    }
  }

  /// Centralized all-reduce: the first AR task waits for the last backward
  /// computation, which itself depends on every backward all-to-all. The
  /// wait gates the communication stream's all-reduce queue only, so without
  /// it the priority pool would start chunks as soon as their gradients are
  /// ready, as FlowMoE does.
  void insertCentralizedARBarrier(Block &entry, StreamAttr compute,
                                  StreamAttr comm) {
    barrier(
        entry,
        [](TaskAttr t) {
          return t.getPhase() == Phase::bwd && t.getKind() != TaskKind::AR &&
                 t.getKind() != TaskKind::OPT && t.getKind() != TaskKind::D &&
                 t.getKind() != TaskKind::C;
        },
        [](TaskAttr t) { return t.getKind() == TaskKind::AR; }, compute, comm);
  }

  /// FSMoE §5: each planned slice starts no earlier than its window — after
  /// the last C' of block w (MoE window E'^w) or its last D' (dense window
  /// AT'^w) — and the unplanned rest after the backward computation, as in
  /// a centralized all-reduce. Without the waits the low-priority pool
  /// would start every slice as soon as its gradient exists.
  LogicalResult insertFsmoeWindowBarriers(Block &entry, int64_t L,
                                          StreamAttr compute,
                                          StreamAttr comm) {
    auto windowOf = [](Operation *op) {
      return op->getAttrOfType<TaskAttr>(MoeDialect::getGradientWindowAttrName());
    };
    for (int64_t w = 0; w < L; ++w)
      for (TaskKind kind : {TaskKind::E, TaskKind::AT}) {
        TaskKind anchor = kind == TaskKind::E ? TaskKind::C : TaskKind::D;
        // The anchors are the inter-node all-to-alls the slices queue
        // behind (FSMoE's FIFO), not expert sharding's intra-node
        // collectives of the same tasks (AG' in C', RS' in D').
        auto isAnchor = [&](Operation *op) {
          TaskAttr t = getTask(op);
          return t && t.getPhase() == Phase::bwd && t.getBlock() == w &&
                 t.getKind() == anchor && isCommunicationTask(op) &&
                 !isShardingCollective(op);
        };
        auto inWindow = [&](Operation *op) {
          TaskAttr t = windowOf(op);
          return t && t.getKind() == kind && t.getBlock() == w;
        };
        // The priorities put a window's slices after its anchor (the
        // anchor is ready as soon as the slices' gradients are); a slice
        // before it could not be held by the wait: refuse, never misplace.
        Operation *last = nullptr;
        for (Operation &op : entry)
          if (isAnchor(&op))
            last = &op;
        for (Operation *op = last ? &entry.front() : nullptr; op != last;
             op = op->getNextNode())
          if (inWindow(op))
            return op->emitOpError()
                   << "moe-schedule: this gradient slice of window "
                   << windowOf(op).getLabel()
                   << " is issued before the window starts (after "
                   << getTask(last).getLabel()
                   << "), so no event can hold it in its window";
        barrierOps(entry, isAnchor, inWindow, comm, comm);
      }
    barrierOps(
        entry,
        [](Operation *op) {
          TaskAttr t = getTask(op);
          return t && t.getPhase() == Phase::bwd &&
                 t.getKind() != TaskKind::AR && t.getKind() != TaskKind::OPT &&
                 t.getKind() != TaskKind::D && t.getKind() != TaskKind::C;
        },
        [&](Operation *op) {
          TaskAttr t = getTask(op);
          return t && t.getKind() == TaskKind::AR && !windowOf(op);
        },
        compute, comm);
    return success();
  }

  /// vanillaEP overlaps nothing. With R = 1 the forward and backward tasks
  /// already form one dependency chain and the all-reduce is centralized;
  /// what remains is to run the update after all communication.
  void insertVanillaBarrier(Block &entry, StreamAttr compute, StreamAttr comm) {
    barrier(
        entry,
        [&](TaskAttr t) {
          return t.getKind() == TaskKind::AR ||
                 (t.getPhase() == Phase::bwd &&
                  (t.getKind() == TaskKind::D || t.getKind() == TaskKind::C));
        },
        [](TaskAttr t) { return t.getKind() == TaskKind::OPT; }, comm, compute);
  }

  void runOnOperation() override {
    std::optional<Policy> parsed = parsePolicy(policy);
    if (!parsed) {
      mlir::emitError(getOperation().getLoc())
          << "moe-schedule: unknown policy '" << policy
          << "' (expected vanilla, pipe-moe, flowmoe-at, flowmoe, "
             "centralized-ar or fsmoe)";
      return signalPassFailure();
    }
    auto models =
        functionsWith(getOperation(), MoeDialect::getModelAttrName(),
                      "moe-schedule", "no function carries a #moe.model");
    if (failed(models))
      return signalPassFailure();
    for (FunctionOpInterface func : *models)
      if (failed(schedule(
              func,
              func->getAttrOfType<ModelAttr>(MoeDialect::getModelAttrName()),
              *parsed)))
        return signalPassFailure();
  }
};
} // namespace
