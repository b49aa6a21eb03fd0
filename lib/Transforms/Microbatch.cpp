//===- Microbatch.cpp - split blocks into R micro-batches -----------------===//
//
// FlowMoE §3.2: "partitions the input tensor of each transformer block into
// R equal-sized parts, and each computing or communicating task (except
// all-reduce) in the MHA layer and the MoE layer will be partitioned into R
// independent subtasks". The split is along the batch dimension B; per
// micro-batch, token tensors are B/R x N x M and the capacity is recomputed
// for B/R samples.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/Tasks.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEMICROBATCH
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// A gate's routing for `micro` samples: a capacity from its factor over
/// the micro-batch's tokens, and indices / weights of that many tokens (or,
/// for expert choice, of that capacity).
LogicalResult retypeGate(GateOp gate, int64_t micro) {
  auto input = cast<RankedTensorType>(gate.getInput().getType());
  std::optional<int64_t> capacity;
  if (auto f = gate.getCapacityFactor()) {
    capacity =
        expertCapacity(f->convertToDouble(), gate.getTopK(),
                       micro * input.getDimSize(1), gate.getNumExperts());
    gate.setCapacity(*capacity);
  }
  for (Value result : {gate.getIndices(), gate.getWeights()}) {
    Type t = gate.isExpertChoice() ? withDim(result.getType(), 1, *capacity)
                                   : withDim(result.getType(), 0, micro);
    result.setType(t);
  }
  return success();
}

/// The capacity of the micro-batch gate that routes `indices`, if any.
std::optional<int64_t> gateCapacityOf(Value indices) {
  if (auto gate = indices.getDefiningOp<GateOp>())
    return gate.getCapacity();
  return std::nullopt;
}

/// A capacity-bounded dispatch or combine takes its micro-batch gate's
/// capacity (a dispatch's slots grow or shrink with it; a combine gives
/// `micro` samples).
LogicalResult retypeDispatch(DispatchOp dispatch) {
  std::optional<int64_t> old = dispatch.getCapacity();
  if (!old)
    return success();
  std::optional<int64_t> fresh = gateCapacityOf(dispatch.getIndices());
  if (!fresh)
    return dispatch.emitOpError() << "needs its routing from a moe.gate to "
                                     "be split into micro-batches";
  auto type = cast<RankedTensorType>(dispatch.getResult().getType());
  int64_t group = type.getDimSize(1) / *old;
  dispatch.setCapacity(*fresh);
  dispatch.getResult().setType(withDim(type, 1, group * *fresh));
  return success();
}

LogicalResult retypeCombine(CombineOp combine, int64_t micro) {
  if (combine.getCapacity()) {
    std::optional<int64_t> fresh = gateCapacityOf(combine.getIndices());
    if (!fresh)
      return combine.emitOpError() << "needs its routing from a moe.gate to "
                                      "be split into micro-batches";
    combine.setCapacity(*fresh);
  }
  combine.getResult().setType(withDim(combine.getResult().getType(), 0, micro));
  return success();
}

/// Expert sharding (moe-expert-sharding): the gathered slots are the
/// group's S times the micro-batch's dispatched ones, and back.
LogicalResult retypeShardCollective(Operation *op) {
  auto collective = cast<CollectiveOpInterface>(op);
  SymbolTableCollection table;
  FailureOr<shard::GridOp> grid =
      lookupGrid(op, collective.getGridAttr(), table);
  if (failed(grid))
    return failure();
  FailureOr<int64_t> size = verifyGroupSize(op, *grid, collective.getAxes());
  if (failed(size))
    return failure();
  auto gather = dyn_cast<shard::AllGatherOp>(op);
  int64_t axis =
      gather ? gather.getGatherAxis().getSExtValue()
             : cast<shard::ReduceScatterOp>(op).getScatterAxis().getSExtValue();
  auto input = cast<RankedTensorType>(op->getOperand(0).getType());
  int64_t rows = input.getDimSize(axis);
  op->getResult(0).setType(
      withDim(input, axis, gather ? rows * *size : rows / *size));
  return success();
}

/// NetMoE (moe-netmoe): the group's counts and placement have G rows per
/// sample of a rank.
LogicalResult retypeGroupRows(Operation *op, int64_t batch, int64_t micro) {
  auto type = cast<RankedTensorType>(op->getResult(0).getType());
  int64_t rows = type.getDimSize(0);
  if (ShapedType::isDynamic(rows) || rows % batch)
    return op->emitOpError() << "cannot be split into micro-batches: " << rows
                             << " rows for " << batch << " samples per rank";
  op->getResult(0).setType(withDim(type, 0, rows / batch * micro));
  return success();
}

/// Everything else in a block maps tokens to tokens: B becomes B/R.
LogicalResult retypeTokens(Operation *op, int64_t batch, int64_t micro) {
  for (Value result : op->getResults()) {
    auto tensor = dyn_cast<RankedTensorType>(result.getType());
    if (!tensor || tensor.getRank() == 0 || tensor.getDimSize(0) != batch)
      return op->emitOpError()
             << "cannot be split into micro-batches: result type "
             << result.getType() << " has no batch dimension of size " << batch;
    result.setType(withDim(tensor, 0, micro));
  }
  return success();
}

/// Rewrites the result types (and capacities) of `op`, a clone whose
/// operands are already micro-batch values, for `micro` samples of the
/// original `batch`.
LogicalResult retypeForMicroBatch(Operation *op, int64_t batch, int64_t micro) {
  if (auto gate = dyn_cast<GateOp>(op))
    return retypeGate(gate, micro);
  if (auto dispatch = dyn_cast<DispatchOp>(op))
    return retypeDispatch(dispatch);
  if (auto combine = dyn_cast<CombineOp>(op))
    return retypeCombine(combine, micro);
  if (isa<shard::AllGatherOp, shard::ReduceScatterOp>(op))
    return retypeShardCollective(op);
  // Ops whose result is their input's type: an expert; tensor-parallel
  // attention (moe-tensor-parallel), which runs on the node's samples, the
  // micro-batches its all-gather collected; NetMoE's experts' norm, on the
  // expert side.
  Value sameAsInput;
  if (auto expert = dyn_cast<ExpertOp>(op))
    sameAsInput = expert.getInput();
  else if (auto attention = dyn_cast<AttentionOp>(op);
           attention &&
           attention.getInput().getDefiningOp<shard::AllGatherOp>())
    sameAsInput = attention.getInput();
  else if (auto norm = dyn_cast<NormOp>(op);
           norm && norm.getInput().getDefiningOp<DispatchOp>())
    sameAsInput = norm.getInput();
  if (sameAsInput) {
    op->getResult(0).setType(sameAsInput.getType());
    return success();
  }
  if (isa<RoutingCountsOp, PlanPlacementOp>(op))
    return retypeGroupRows(op, batch, micro);
  return retypeTokens(op, batch, micro);
}

struct MicrobatchPass : public moe::impl::MoeMicrobatchBase<MicrobatchPass> {
  using MoeMicrobatchBase::MoeMicrobatchBase;

  LogicalResult splitBlock(BlockOp block, int64_t numBlocks) {
    auto fail = [&](const Twine &why) {
      return block.emitOpError()
             << "cannot split into " << static_cast<int64_t>(degree)
             << " micro-batches: " << why;
    };
    if (block.getInputs().empty())
      return fail("the block has no inputs");
    int64_t batch = -1;
    for (Value input : block.getInputs()) {
      auto type = dyn_cast<RankedTensorType>(input.getType());
      if (!type || type.getRank() == 0 || type.isDynamicDim(0))
        return fail("every input needs a static batch dimension");
      if (batch >= 0 && type.getDimSize(0) != batch)
        return fail("inputs have different batch sizes");
      batch = type.getDimSize(0);
    }
    if (batch % degree != 0)
      return fail("the batch of " + Twine(batch) + " samples does not divide");
    int64_t micro = batch / degree;

    Block &body = block.getBody().front();
    OpBuilder builder(block);
    builder.setInsertionPointToStart(&body);
    // Splits of the region arguments, one per micro-batch.
    SmallVector<SmallVector<Value>> parts(degree);
    for (BlockArgument arg : body.getArguments()) {
      auto type = cast<RankedTensorType>(arg.getType());
      SmallVector<Type> partTypes(degree, withDim(type, 0, micro));
      auto split = SplitOp::create(builder, arg.getLoc(), partTypes, arg);
      for (int64_t r = 0; r < degree; ++r)
        parts[r].push_back(split.getResult(r));
    }
    auto yield = cast<YieldOp>(body.getTerminator());
    SmallVector<Operation *> original;
    for (Operation &op : body.without_terminator())
      if (!isa<SplitOp>(op) || op.getBlock() != &body ||
          !llvm::is_contained(body.getArguments(), op.getOperand(0)))
        original.push_back(&op);

    builder.setInsertionPoint(yield);
    SmallVector<SmallVector<Value>> outputs(degree);
    for (int64_t r = 0; r < degree; ++r) {
      IRMapping map;
      map.map(body.getArguments(), parts[r]);
      SmallVector<Operation *> clones;
      for (Operation *op : original) {
        Operation *clone = builder.clone(*op, map);
        clones.push_back(clone);
        if (failed(retypeForMicroBatch(clone, batch, micro)))
          return failure();
        // noisy_topk draws its noise per sample of the whole batch: part r
        // starts at sample r * micro, so splitting keeps every token's noise.
        if (auto gate = dyn_cast<GateOp>(clone);
            gate && gate.getKind() == GateKind::noisy_topk)
          gate.setSampleOffset(gate.getSampleOffsetOrZero() + r * micro);
        map.map(op->getResults(), clone->getResults());
      }
      for (Value v : yield.getOperands())
        outputs[r].push_back(map.lookupOrDefault(v));
      labelBlockForward(clones, block.getIndex(), r, numBlocks);
    }
    SmallVector<Value> merged;
    for (auto [i, v] : llvm::enumerate(yield.getOperands())) {
      SmallVector<Value> pieces;
      for (int64_t r = 0; r < degree; ++r)
        pieces.push_back(outputs[r][i]);
      merged.push_back(
          MergeOp::create(builder, v.getLoc(), v.getType(), pieces));
    }
    yield->setOperands(merged);
    for (Operation *op : llvm::reverse(original))
      op->erase();
    return success();
  }

  void runOnOperation() override {
    if (degree < 1) {
      mlir::emitError(getOperation().getLoc())
          << "moe-microbatch: degree must be >= 1, got "
          << static_cast<int64_t>(degree);
      return signalPassFailure();
    }
    for (auto func : getOperation().getOps<FunctionOpInterface>()) {
      auto model =
          func->getAttrOfType<ModelAttr>(MoeDialect::getModelAttrName());
      if (!model)
        continue;
      if (model.getBatch() % degree != 0) {
        mlir::emitError(func.getLoc())
            << "moe-microbatch: degree " << static_cast<int64_t>(degree)
            << " does not divide the batch B = " << model.getBatch();
        return signalPassFailure();
      }
      SmallVector<BlockOp> blocks;
      func->walk([&](BlockOp block) { blocks.push_back(block); });
      if (blocks.empty()) {
        mlir::emitError(func.getLoc())
            << "moe-microbatch: the model has no moe.block to "
               "split (was it already flattened into a step?)";
        return signalPassFailure();
      }
      for (BlockOp block : blocks) {
        if (degree > 1) {
          if (failed(splitBlock(block, model.getLayers())))
            return signalPassFailure();
          continue;
        }
        SmallVector<Operation *> ops;
        for (Operation &op : block.getBody().front().without_terminator())
          ops.push_back(&op);
        labelBlockForward(ops, block.getIndex(), 0, model.getLayers());
      }
    }
  }
};
} // namespace
