//===- ModelVerifier.cpp - check #moe.model against the model body --------===//
//
// A model function states its hyper-parameters once, in `moe.model`; every
// op in its body must agree with them, so that passes and the cost model can
// read L, B, N, M, H, E, k, f from the attribute alone.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"

#include "ShapeDiagnostics.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

namespace {
/// Attaches a note that points at the function holding the model attribute,
/// so that a user sees both ends of the disagreement.
InFlightDiagnostic disagree(Operation *op, Operation *func) {
  InFlightDiagnostic diag = op->emitOpError();
  diag.attachNote(func->getLoc()) << "model declared here";
  return diag;
}

struct ModelChecker {
  Operation *func;
  ModelAttr model;
  int64_t epSize = 0;

  LogicalResult checkGrid() {
    SymbolTableCollection table;
    FailureOr<shard::GridOp> grid = lookupGrid(func, model.getGrid(), table);
    if (failed(grid))
      return failure();
    FailureOr<int64_t> ep = verifyGroupSize(func, *grid, model.getEpAxes());
    if (failed(ep) || failed(verifyGroupSize(func, *grid, model.getDpAxes())) ||
        failed(verifyGroupSize(func, *grid, model.getIntraAxes())))
      return failure();
    epSize = *ep;
    if (failed(checkEveryAxisDataParallel(*grid)) ||
        failed(checkNoExpertReplicas(*grid)))
      return failure();
    if (model.getExperts() % epSize != 0)
      return func->emitError()
             << "model has " << model.getExperts()
             << " experts, which do not divide evenly over the " << epSize
             << " ranks of the expert-parallel group";
    return success();
  }

  /// Every rank reads its own samples, so the dense weights' gradients are
  /// all-reduced over dp_axes; an axis of more than one rank outside them
  /// would hold copies of the dense weights that nothing keeps equal (the
  /// ranks along it train apart: a silently different model). Refused.
  LogicalResult checkEveryAxisDataParallel(shard::GridOp grid) {
    SmallVector<int16_t> outside;
    for (auto [a, size] : llvm::enumerate(grid.getShape()))
      if (size > 1 && !llvm::is_contained(model.getDpAxes(), int16_t(a)))
        outside.push_back(int16_t(a));
    if (outside.empty())
      return success();
    return func->emitError()
           << "grid axes [" << outside << "] of " << model.getGrid()
           << " have more than one rank but are not in dp_axes ["
           << model.getDpAxes()
           << "]: every rank reads its own samples, and the dense weights' "
              "copies along those axes would not be kept equal (no "
              "all-reduce of their gradients), so put them in dp_axes";
  }

  /// A data-parallel axis (of more than one rank) outside ep_axes would
  /// hold a replica of each expert per coordinate. Neither the step (no
  /// all-reduce of expert gradients over the replicas) nor the weight
  /// draws (per rank) keep replicas equal, so they would train apart: a
  /// silently different model. Refused. Expert sharding's intra axes are
  /// no replicas: there each rank holds a shard (moe.hidden_shard).
  LogicalResult checkNoExpertReplicas(shard::GridOp grid) {
    auto f = cast<FunctionOpInterface>(func);
    bool sharded = llvm::any_of(f.getArguments(), [&](BlockArgument a) {
      return f.getArgAttr(a.getArgNumber(),
                          MoeDialect::getHiddenShardAttrName());
    });
    SmallVector<int16_t> replicated;
    for (int16_t a : model.getDpAxes())
      if (grid.getShape()[a] > 1 && !llvm::is_contained(model.getEpAxes(), a) &&
          !(sharded && llvm::is_contained(model.getIntraAxes(), a)))
        replicated.push_back(a);
    if (replicated.empty())
      return success();
    return func->emitError()
           << "model replicates its experts over data-parallel axes ["
           << replicated << "] of " << model.getGrid()
           << ", which are not in ep_axes [" << model.getEpAxes()
           << "]; expert replicas are not kept equal (no all-reduce of "
              "their gradients), so put those axes in ep_axes";
  }

  LogicalResult checkBlocks() {
    int64_t next = 0;
    for (Block &block : cast<FunctionOpInterface>(func).getFunctionBody())
      for (auto op : block.getOps<BlockOp>()) {
        if (static_cast<int64_t>(op.getIndex()) != next)
          return disagree(op, func)
                 << "is block " << op.getIndex() << " but block " << next
                 << " was expected next (blocks are numbered 0..L-1 in order)";
        ++next;
      }
    if (next == 0) {
      // A training step has its blocks inlined: count the blocks its
      // forward AT tasks are labelled with instead (every block has one;
      // a dense block, e.g. DeepSeek's first layers, has no dispatch).
      llvm::SmallDenseSet<int64_t> labelled;
      func->walk([&](Operation *op) {
        if (auto task =
                op->getAttrOfType<TaskAttr>(MoeDialect::getTaskAttrName()))
          if (task.getKind() == TaskKind::AT &&
              task.getPhase() == Phase::fwd && task.getBlock() >= 0)
            labelled.insert(task.getBlock());
      });
      if (!labelled.empty()) {
        if (static_cast<int64_t>(labelled.size()) != model.getLayers())
          return func->emitError()
                 << "model declares " << model.getLayers()
                 << " layers but its step has attention tasks of "
                 << labelled.size() << " blocks";
        return success();
      }
    }
    if (next != model.getLayers())
      return func->emitError()
             << "model declares " << model.getLayers()
             << " layers but its body has " << next << " moe.block ops";
    return success();
  }

  /// The data-parallel axes without the intra-node ones: the group that
  /// reduces tensor-parallel attention's shards (moe-tensor-parallel; a
  /// node's ranks hold different heads).
  SmallVector<int16_t> nodeDpAxes() {
    SmallVector<int16_t> axes;
    for (int16_t a : model.getDpAxes())
      if (!llvm::is_contained(model.getIntraAxes(), a))
        axes.push_back(a);
    return axes;
  }

  LogicalResult checkGroup(Operation *op, FlatSymbolRefAttr grid,
                           ArrayRef<int16_t> axes, ArrayRef<int16_t> expected,
                           StringRef groupName) {
    if (grid != model.getGrid() || axes != expected)
      return disagree(op, func)
             << "must run on the model's " << groupName << " group ("
             << model.getGrid() << " axes [" << expected << "])";
    return success();
  }

  /// Gradients are reduced over the data-parallel group, or over the
  /// nodes only (tensor-parallel shards); the clipping norm's partial sums
  /// also over a node's ranks (shards: GradientGroups.h).
  LogicalResult checkAllReduce(AllReduceOp reduce) {
    ArrayRef<int16_t> axes = reduce.getAxes();
    if (model.getIntraAxes().empty())
      return checkGroup(reduce, reduce.getGridAttr(), axes, model.getDpAxes(),
                        "data-parallel");
    if (reduce.getGridAttr() == model.getGrid() &&
        (axes == model.getDpAxes() || axes == ArrayRef<int16_t>(nodeDpAxes()) ||
         axes == model.getIntraAxes()))
      return success();
    return disagree(reduce, func)
           << "must run on the model's data-parallel group ("
           << model.getGrid() << " axes [" << model.getDpAxes()
           << "]), its nodes (axes [" << nodeDpAxes()
           << "]) or a node's ranks (axes [" << model.getIntraAxes() << "])";
  }

  LogicalResult checkGate(GateOp gate) {
    if (gate.getNumExperts() != model.getExperts())
      return disagree(gate, func)
             << "routes to " << gate.getNumExperts()
             << " experts but the model has " << model.getExperts();
    if (gate.getTopK() != model.getTopK())
      return disagree(gate, func)
             << "has top_k = " << gate.getTopK()
             << " but the model has k = " << model.getTopK();
    std::optional<double> f;
    if (auto attr = gate.getCapacityFactor())
      f = attr->convertToDouble();
    if (model.isDropless() ? f.has_value() : (!f || *f != model.getF()))
      return disagree(gate, func)
             << "has capacity factor "
             << (f ? formatDouble(*f) : std::string("dropless"))
             << " but the model has "
             << (model.isDropless() ? std::string("dropless")
                                    : formatDouble(model.getF()));
    auto input = cast<ShapedType>(gate.getInput().getType());
    return verifyShape(gate, "input", input,
                       {ShapedType::kDynamic, model.getSeq(), model.getEmbed()})
                   .succeeded()
               ? checkBatch(gate, input.getDimSize(0))
               : failure();
  }

  /// Micro-batching divides B by R, so a gate may see B/R samples.
  LogicalResult checkBatch(Operation *op, int64_t batch) {
    if (ShapedType::isDynamic(batch) ||
        (batch > 0 && model.getBatch() % batch == 0))
      return success();
    return disagree(op, func)
           << "sees a batch of " << batch
           << " samples, which is not the model's B = " << model.getBatch()
           << " or a micro-batch of it";
  }

  /// H, or H / S for an expert whose weights are a shard (expert sharding:
  /// moe.hidden_shard on its up weight, reached through a vjp body's
  /// argument in a training step).
  int64_t expectedHidden(ExpertOp expert) {
    Value up = expert.getUp();
    if (auto arg = dyn_cast<BlockArgument>(up))
      if (auto vjp = dyn_cast_or_null<VjpOp>(arg.getOwner()->getParentOp()))
        up = vjp.getPrimals()[arg.getArgNumber()];
    auto arg = dyn_cast<BlockArgument>(up);
    auto f = arg ? dyn_cast_or_null<FunctionOpInterface>(
                       arg.getOwner()->getParentOp())
                 : FunctionOpInterface();
    if (f && arg.getOwner()->isEntryBlock())
      if (auto shard = f.getArgAttrOfType<DenseI64ArrayAttr>(
              arg.getArgNumber(), MoeDialect::getHiddenShardAttrName());
          shard && shard.size() == 2 && shard[1] > 0)
        return model.getHidden() / shard[1];
    return model.getHidden();
  }

  LogicalResult checkExpert(ExpertOp expert) {
    int64_t localExperts = model.getExperts() / epSize;
    auto input = cast<ShapedType>(expert.getInput().getType());
    if (!sameOrDynamic(input.getDimSize(0), localExperts))
      return disagree(expert, func)
             << "holds " << input.getDimSize(0) << " local experts but the "
             << "model spreads " << model.getExperts() << " experts over "
             << epSize << " ranks (" << localExperts << " per rank)";
    if (int64_t h = expectedHidden(expert);
        !sameOrDynamic(expert.getHiddenSize(), h))
      return disagree(expert, func)
             << "has hidden size " << expert.getHiddenSize()
             << " but the model has H = " << model.getHidden()
             << (h != model.getHidden()
                     ? " (" + std::to_string(h) + " per expert shard)"
                     : std::string());
    return success();
  }

  LogicalResult checkBody() {
    WalkResult result = func->walk([&](Operation *op) -> WalkResult {
      LogicalResult ok = success();
      if (auto gate = dyn_cast<GateOp>(op))
        ok = checkGate(gate);
      else if (auto expert = dyn_cast<ExpertOp>(op))
        ok = checkExpert(expert);
      else if (auto dispatch = dyn_cast<DispatchOp>(op))
        ok = checkRouted(dispatch);
      else if (auto combine = dyn_cast<CombineOp>(op))
        ok = checkRouted(combine);
      else if (auto reduce = dyn_cast<AllReduceOp>(op))
        ok = checkAllReduce(reduce);
      return failed(ok) ? WalkResult::interrupt() : WalkResult::advance();
    });
    return failure(result.wasInterrupted());
  }

  template <typename RoutedOp> LogicalResult checkRouted(RoutedOp op) {
    if (op.getNumExperts() != model.getExperts())
      return disagree(op, func)
             << "routes to " << op.getNumExperts()
             << " experts but the model has " << model.getExperts();
    return checkGroup(op, op.getGridAttr(), op.getAxes(), model.getEpAxes(),
                      "expert-parallel");
  }
};
} // namespace

LogicalResult mlir::moe::verifyModel(Operation *funcOp, ModelAttr model) {
  ModelChecker checker{funcOp, model};
  if (failed(checker.checkGrid()) || failed(checker.checkBlocks()) ||
      failed(checker.checkBody()))
    return failure();
  return success();
}
