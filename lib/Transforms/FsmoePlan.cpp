//===- FsmoePlan.cpp - FSMoE's per-layer degrees and gradient slices ------===//
//
// FSMoE §4-5 on a training step: the existing planning library decides
// (PipelineDegree.h: Algorithm 1; GradientPartition.h: §5), this pass feeds
// it the step's own costs and writes its decisions into the IR, where
// moe-token-pipeline (per-layer degrees) and moe-schedule policy=fsmoe
// (slice placement) carry them out and moe-verify-schedule checks the
// slices' causality.
//
// The backward windows, in execution order: per block l = L-1 .. 0 its MoE
// layer (C', E', D': Algorithm 1's backward phase, t_gar = its slice) and
// its dense part (AT': attention, norms, gate, whose length a slice may
// fill). A gradient is ready for the first window after the task that
// produces it (Tasks.h backwardPosition).
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/Chunking.h"
#include "moe/Analysis/CostModel.h"
#include "moe/Analysis/GradientPartition.h"
#include "moe/Analysis/ModelStats.h"
#include "moe/Analysis/Tasks.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/ToolOutputFile.h"

#include <cmath>
#include <map>

namespace mlir::moe {
#define GEN_PASS_DEF_MOEFSMOEPLAN
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// The tasks of one block the plan prices.
struct BlockTasks {
  DispatchOp dispatch;
  Operation *expert = nullptr, *dispatchVjp = nullptr, *expertVjp = nullptr;
  /// Expert sharding's all-gather and reduce-scatter (moe-expert-sharding),
  /// forward and backward (each the other's adjoint); null without it.
  Operation *allGather = nullptr, *reduceScatter = nullptr,
            *allGatherBwd = nullptr, *reduceScatterBwd = nullptr;
  SmallVector<Operation *> denseBackward;
};

/// One gradient all-reduced by the step, in its all-reduce.
struct Gradient {
  AllReduceOp allReduce;
  unsigned operand = 0;
  int64_t bytes = 0, elementBytes = 4;
  /// Index of the first window it is ready for (windows.size(): none).
  unsigned readyWindow = 0;
};

struct FsmoePlanPass : public moe::impl::MoeFsmoePlanBase<FsmoePlanPass> {
  using MoeFsmoePlanBase::MoeFsmoePlanBase;

  /// Window 2(L-1-l) is block l's MoE layer, the next its dense part.
  static unsigned windowOf(int64_t numBlocks, int64_t block, bool dense) {
    return 2 * (numBlocks - 1 - block) + (dense ? 1 : 0);
  }
  static TaskAttr windowTask(MLIRContext *ctx, int64_t numBlocks,
                             unsigned window) {
    int64_t block = numBlocks - 1 - window / 2;
    return TaskAttr::get(ctx, window % 2 ? TaskKind::AT : TaskKind::E,
                         Phase::bwd, block, 0, -1);
  }

  FailureOr<std::map<int64_t, BlockTasks>>
  collectBlocks(FunctionOpInterface func) {
    std::map<int64_t, BlockTasks> blocks;
    for (Operation &op : func.getFunctionBody().front()) {
      TaskAttr t = getTask(&op);
      if (!t || t.getBlock() < 0)
        continue;
      if (t.getMicro() != 0)
        return op.emitOpError()
               << "moe-fsmoe-plan: plans token chunks of a step without "
                  "micro-batches (use moe-microbatch degree=1)";
      auto vjp = dyn_cast<VjpOp>(op);
      Operation *forward = vjp ? vjp.getForwardOp() : &op;
      BlockTasks &b = blocks[t.getBlock()];
      if (auto d = dyn_cast<DispatchOp>(forward)) {
        if ((!d.getCapacity() && !d.isVariable()) || d.getSlots() ||
            d.getPart())
          return op.emitOpError()
                 << "moe-fsmoe-plan: token chunks need a capacity-routed or "
                    "variable-count dispatch that is not chunked yet";
        if (vjp)
          b.dispatchVjp = &op;
        else if (b.dispatch)
          return op.emitOpError()
                 << "moe-fsmoe-plan: block " << t.getBlock()
                 << " has a second MoE layer";
        else
          b.dispatch = d;
      } else if (isa<GatherRowsOp, ScatterRowsOp>(forward)) {
        return op.emitOpError()
               << "moe-fsmoe-plan: expert sharding of a variable-count layer "
                  "is not cut into token chunks (use another policy, or "
                  "bound the model with moe-bound-dropless)";
      } else if (isa<ExpertOp>(forward)) {
        (vjp ? b.expertVjp : b.expert) = &op;
      } else if (isa<shard::AllGatherOp>(op) && t.getKind() != TaskKind::AT) {
        // (Tensor-parallel attention's collectives are AT tasks: dense.)
        (t.getPhase() == Phase::bwd ? b.allGatherBwd : b.allGather) = &op;
      } else if (isa<shard::ReduceScatterOp>(op) &&
                 t.getKind() != TaskKind::AT) {
        (t.getPhase() == Phase::bwd ? b.reduceScatterBwd : b.reduceScatter) =
            &op;
      } else if (t.getKind() == TaskKind::AT && t.getPhase() == Phase::bwd &&
                 (vjp || isa<shard::AllGatherOp, shard::ReduceScatterOp>(op))) {
        // Tensor-parallel attention's backward collectives lengthen the
        // dense window as its computation does (FSMoE's MP all-gather and
        // reduce-scatter, on the intra-node link).
        b.denseBackward.push_back(&op);
      }
    }
    for (auto &[block, b] : blocks)
      if (!b.dispatch || !b.expert || !b.dispatchVjp || !b.expertVjp)
        return mlir::emitError(func.getLoc())
               << "moe-fsmoe-plan: block " << block
               << " has no complete MoE layer (dispatch, experts and their "
                  "vjps) in this training step";
    return blocks;
  }

  /// Algorithm 1's inputs for one phase: one dispatch's exchange (FSMoE's
  /// t_a2a, the combine's being the same size), the experts and, with
  /// expert sharding, its all-gather and reduce-scatter (t_ag, t_rs; 0
  /// without).
  FailureOr<MoePhaseCosts> phaseCosts(CostModel &model, Operation *exchange,
                                      Operation *experts, Operation *gather,
                                      Operation *scatter) {
    FailureOr<ChunkedCost> a2a = model.chunkedCost(exchange);
    FailureOr<ChunkedCost> expert = model.chunkedCost(experts);
    if (failed(a2a) || failed(expert))
      return failure();
    MoePhaseCosts costs;
    costs.allToAll = *a2a;
    costs.expert = *expert;
    for (auto [op, cost] : {std::make_pair(gather, &costs.allGather),
                            std::make_pair(scatter, &costs.reduceScatter)}) {
      if (!op)
        continue;
      FailureOr<ChunkedCost> c = model.chunkedCost(op);
      if (failed(c))
        return failure();
      *cost = *c;
    }
    return costs;
  }

  LogicalResult plan(FunctionOpInterface func, CostModel &model,
                     raw_ostream *report) {
    Block &entry = func.getFunctionBody().front();
    if (func->hasAttr(MoeDialect::getScheduleAttrName()))
      return mlir::emitError(func.getLoc())
             << "moe-fsmoe-plan: the step is already scheduled (run it "
                "before moe-schedule)";
    FailureOr<std::map<int64_t, BlockTasks>> blocks = collectBlocks(func);
    if (failed(blocks))
      return failure();
    if (blocks->empty())
      return mlir::emitError(func.getLoc())
             << "moe-fsmoe-plan: not a training step with MoE layers (run "
                "moe-build-train-step first)";
    int64_t numBlocks = blocks->rbegin()->first + 1;
    if (int64_t(blocks->size()) != numBlocks)
      return mlir::emitError(func.getLoc())
             << "moe-fsmoe-plan: every block needs an MoE layer";

    DegreeOptions degrees;
    // A padded layer has at most C chunks; a variable-count one any number
    // (a chunk of a run shorter than r may be empty).
    for (auto &entry : *blocks)
      if (std::optional<int64_t> capacity =
              entry.second.dispatch.getCapacity())
        llvm::erase_if(degrees.degrees,
                       [&](int64_t r) { return r > *capacity; });

    // The windows and their costs.
    std::vector<GradientWindow> windows(2 * numBlocks);
    SmallVector<MoePhaseCosts> forward(numBlocks);
    for (auto &[block, b] : *blocks) {
      FailureOr<MoePhaseCosts> fwd = phaseCosts(
          model, b.dispatch, b.expert, b.allGather, b.reduceScatter);
      FailureOr<MoePhaseCosts> bwd =
          phaseCosts(model, b.dispatchVjp, b.expertVjp, b.allGatherBwd,
                     b.reduceScatterBwd);
      if (failed(fwd) || failed(bwd))
        return failure();
      forward[block] = *fwd;
      windows[windowOf(numBlocks, block, false)].moe = *bwd;
      double dense = 0;
      for (Operation *op : b.denseBackward) {
        FailureOr<TaskCost> c = model.cost(op);
        if (failed(c))
          return failure();
        dense += c->us;
      }
      windows[windowOf(numBlocks, block, true)].denseUs = dense;
    }

    // The gradients, in the order they become ready.
    SmallVector<AllReduceOp> allReduces;
    for (Operation &op : entry)
      if (auto ar = dyn_cast<AllReduceOp>(op))
        if (TaskAttr t = getTask(ar);
            t && t.getKind() == TaskKind::AR && !ar.isChunk() &&
            t.getChunk() < 0)
          allReduces.push_back(ar);
    if (allReduces.empty())
      return mlir::emitError(func.getLoc())
             << "moe-fsmoe-plan: the step all-reduces no gradient";
    SmallVector<Gradient> gradients;
    // Gradients of every group (replicated ones over all data-parallel
    // ranks, tensor-parallel shards' over the nodes: GradientGroups.h) go
    // into one ready-ordered byte stream: they share the inter-node link
    // the windows model. Each all-reduce is then cut into its own slices,
    // over its own group (sliceAllReduces).
    for (AllReduceOp ar : allReduces) {
      for (auto [i, input] : llvm::enumerate(ar.getInputs())) {
        Gradient g{ar, unsigned(i), tensorBytes(input.getType()),
                   (cast<ShapedType>(input.getType())
                        .getElementTypeBitWidth() +
                    7) /
                       8,
                   0};
        if (g.bytes < 0)
          return ar.emitOpError() << "moe-fsmoe-plan: gradient #" << i
                                  << " has no static size";
        Operation *producer = input.getDefiningOp();
        TaskAttr t = producer ? getTask(producer) : TaskAttr();
        // Unlabelled producers count as the last work of the backward.
        auto at = t ? backwardPosition(t) : std::make_tuple(3, int64_t(0), 0);
        g.readyWindow = windows.size();
        for (unsigned w = 0; w < windows.size(); ++w)
          if (at < backwardPosition(
                       windowTask(&getContext(), numBlocks, w))) {
            g.readyWindow = w;
            break;
          }
        if (g.readyWindow < windows.size())
          windows[g.readyWindow].readyBytes += g.bytes;
        gradients.push_back(g);
      }
    }
    llvm::stable_sort(gradients, [](const Gradient &a, const Gradient &b) {
      return a.readyWindow < b.readyWindow;
    });

    // §5, then Algorithm 1 per layer. With several groups the partition
    // prices every byte at their byte-weighted mean rate and each slice at
    // the largest start-up cost (§5's model has one all-reduce time).
    double arBytes = 0, arWorkUs = 0, arAlphaUs = 0;
    for (AllReduceOp ar : allReduces) {
      FailureOr<ChunkedCost> cost = model.chunkedCost(ar);
      if (failed(cost))
        return failure();
      for (Value v : ar.getInputs())
        arBytes += tensorBytes(v.getType());
      arWorkUs += cost->workUs;
      arAlphaUs = std::max(arAlphaUs, cost->alphaUs);
    }
    AllReduceTime allReduce{arAlphaUs, arBytes > 0 ? arWorkUs / arBytes : 0.0};
    PartitionOptions options;
    options.degrees = degrees;
    options.differentialEvolution = evolution;
    GradientPlan plan = partitionGradients(windows, allReduce, options);

    MLIRContext *ctx = &getContext();
    Builder builder(ctx);
    SmallVector<DegreeChoice> fwdChoice(numBlocks);
    for (auto &[block, b] : *blocks) {
      fwdChoice[block] = findOptimalPipelineDegree(forward[block], 0, degrees);
      int64_t rBwd = plan.windows[windowOf(numBlocks, block, false)].degree;
      b.dispatch->setAttr(
          MoeDialect::getTokenDegreeAttrName(),
          builder.getDenseI64ArrayAttr({fwdChoice[block].degree, rBwd}));
    }

    // The cuts of the ready-ordered byte stream: window w ends after the
    // plan's bytes up to w, never past what is ready by then.
    SmallVector<int64_t> cuts;
    double planned = 0;
    int64_t ready = 0;
    unsigned next = 0;
    for (unsigned w = 0; w < windows.size(); ++w) {
      for (; next < gradients.size() && gradients[next].readyWindow <= w;
           ++next)
        ready += gradients[next].bytes;
      planned += plan.windows[w].bytes;
      int64_t cut = std::min<int64_t>(std::floor(planned), ready);
      cuts.push_back(std::max(cut, cuts.empty() ? int64_t(0) : cuts.back()));
    }
    SmallVector<int64_t> bytes, elements;
    for (const Gradient &g : gradients) {
      bytes.push_back(g.bytes);
      elements.push_back(g.elementBytes);
    }
    SmallVector<TensorPiece> pieces = sliceStream(bytes, elements, cuts);
    sliceAllReduces(allReduces, gradients, pieces, numBlocks,
                    windows.size());

    if (report)
      printPlan(*report, func, *blocks, forward, fwdChoice, windows, plan,
                cuts, numBlocks, model.getProfile().name);
    return success();
  }

  /// Replaces each all-reduce by its pieces, whole tensors of one window
  /// packed into one op, each labelled with its window.
  void sliceAllReduces(ArrayRef<AllReduceOp> allReduces,
                       ArrayRef<Gradient> gradients,
                       ArrayRef<TensorPiece> pieces, int64_t numBlocks,
                       unsigned numWindows) {
    MLIRContext *ctx = &getContext();
    for (AllReduceOp ar : allReduces) {
      SmallVector<GradientChunk> chunks;
      SmallVector<unsigned> windowOfChunk;
      for (const TensorPiece &p : pieces) {
        const Gradient &g = gradients[p.tensor];
        if (g.allReduce != ar)
          continue;
        bool whole = p.offset == 0 && p.size == g.bytes;
        if (whole && !chunks.empty() && !chunks.back().isRange() &&
            windowOfChunk.back() == p.slice) {
          chunks.back().tensors.push_back(g.operand);
          continue;
        }
        GradientChunk chunk;
        chunk.tensors.push_back(g.operand);
        if (!whole) {
          chunk.offset = p.offset;
          chunk.size = p.size;
        }
        chunks.push_back(chunk);
        windowOfChunk.push_back(p.slice);
      }
      replaceByChunks(ar, chunks, [&](unsigned i, AllReduceOp slice) {
        if (windowOfChunk[i] < numWindows)
          slice->setAttr(MoeDialect::getGradientWindowAttrName(),
                         windowTask(ctx, numBlocks, windowOfChunk[i]));
      });
    }
  }

  void printPlan(raw_ostream &os, FunctionOpInterface func,
                 const std::map<int64_t, BlockTasks> &blocks,
                 ArrayRef<MoePhaseCosts> forward,
                 ArrayRef<DegreeChoice> fwdChoice,
                 const std::vector<GradientWindow> &windows,
                 const GradientPlan &plan, ArrayRef<int64_t> cuts,
                 int64_t numBlocks, StringRef profileName) {
    os << "fsmoe plan @" << func.getName() << " on profile " << profileName
       << " (simulated)\n";
    for (auto &[block, b] : blocks) {
      const WindowPlan &w = plan.windows[windowOf(numBlocks, block, false)];
      os << "  block " << block << ": r_fwd " << fwdChoice[block].degree
         << " (case " << int(fwdChoice[block].pipelineCase) << ", "
         << llvm::format("%.1f", fwdChoice[block].timeUs) << " us), r_bwd "
         << w.degree << " (" << llvm::format("%.1f", w.timeUs)
         << " us with its slice); forward t_a2a "
         << llvm::format("%.1f", forward[block].allToAll.whole())
         << " us, t_ag "
         << llvm::format("%.1f", forward[block].allGather.whole())
         << " us, t_rs "
         << llvm::format("%.1f", forward[block].reduceScatter.whole())
         << " us\n";
    }
    int64_t previous = 0;
    for (unsigned i = 0; i < windows.size(); ++i) {
      os << "  window " << windowTask(&getContext(), numBlocks, i).getLabel()
         << ": ready " << int64_t(windows[i].readyBytes) << " B, reduces "
         << cuts[i] - previous << " B";
      if (windows[i].denseUs > 0)
        os << ", dense " << llvm::format("%.1f", windows[i].denseUs) << " us";
      os << "\n";
      previous = cuts[i];
    }
    const char *source =
        plan.source == GradientPlan::Source::DifferentialEvolution
            ? "differential evolution"
        : plan.source == GradientPlan::Source::Trivial ? "trivial"
                                                       : "greedy";
    os << "  tail (after the backward): the rest; backward predicted "
       << llvm::format("%.1f", plan.predictedUs) << " us (greedy "
       << llvm::format("%.1f", plan.greedyUs) << ", trivial "
       << llvm::format("%.1f", plan.trivialUs) << "), from " << source
       << "\n";
  }

  void runOnOperation() override {
    FailureOr<HardwareProfile> hw =
        loadPassProfile(getOperation(), "moe-fsmoe-plan", profile);
    if (failed(hw))
      return signalPassFailure();
    std::unique_ptr<llvm::ToolOutputFile> file;
    if (!report.empty() &&
        !(file = openPassOutput(getOperation(), "moe-fsmoe-plan", report)))
      return signalPassFailure();
    auto funcs =
        functionsWith(getOperation(), MoeDialect::getModelAttrName(),
                      "moe-fsmoe-plan", "no function carries a #moe.model");
    if (failed(funcs))
      return signalPassFailure();
    CostModel model(*hw);
    for (FunctionOpInterface func : *funcs)
      if (failed(plan(func, model, file ? &file->os() : nullptr)))
        return signalPassFailure();
    if (file)
      file->keep();
  }
};

} // namespace
