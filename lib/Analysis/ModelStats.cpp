//===- ModelStats.cpp - parameter and traffic volumes of a model ----------===//

#include "moe/Analysis/ModelStats.h"

#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace mlir::moe;

int64_t mlir::moe::tensorBytes(Type type) {
  auto shaped = dyn_cast<ShapedType>(type);
  if (!shaped || !shaped.hasStaticShape())
    return -1;
  return shaped.getNumElements() * ((shaped.getElementTypeBitWidth() + 7) / 8);
}

static int64_t numElements(Value value) {
  auto shaped = cast<ShapedType>(value.getType());
  return shaped.hasStaticShape() ? shaped.getNumElements() : 0;
}

/// Every op that holds weights takes its activation first and its weights
/// after it (see MoeOps.td); the embedding takes ids then the table.
static bool holdsWeights(Operation *op) {
  return isa<AttentionOp, GateOp, NormOp, LinearOp, EmbeddingOp, ExpertOp,
             SharedExpertOp, PositionEmbeddingOp, BiasAddOp>(op);
}

namespace {
struct WeightSets {
  llvm::SetVector<Value> dense, expert;

  void collect(Operation *root) {
    root->walk([&](Operation *op) {
      if (!holdsWeights(op))
        return;
      for (Value weight : op->getOperands().drop_front())
        (isa<ExpertOp>(op) ? expert : dense).insert(weight);
    });
  }
  static int64_t count(const llvm::SetVector<Value> &values) {
    int64_t total = 0;
    for (Value v : values)
      total += numElements(v);
    return total;
  }
  static int64_t bytes(const llvm::SetVector<Value> &values) {
    int64_t total = 0;
    for (Value v : values)
      total += std::max<int64_t>(tensorBytes(v.getType()), 0);
    return total;
  }
};
} // namespace

int64_t ModelStats::totalDenseParams() const {
  int64_t total = outerDenseParams;
  for (const BlockStats &block : blocks)
    total += block.denseParams;
  return total;
}

int64_t ModelStats::totalExpertParams() const {
  int64_t total = 0;
  for (const BlockStats &block : blocks)
    total += block.localExpertParams;
  return total * epSize;
}

FailureOr<ModelStats> mlir::moe::computeModelStats(FunctionOpInterface func) {
  auto model = func->getAttrOfType<ModelAttr>(MoeDialect::getModelAttrName());
  if (!model)
    return mlir::emitError(func->getLoc())
           << "function has no #moe.model attribute";
  ModelStats stats;
  stats.model = model;

  SymbolTableCollection table;
  FailureOr<shard::GridOp> grid = lookupGrid(func, model.getGrid(), table);
  if (failed(grid))
    return failure();
  FailureOr<int64_t> ep = verifyGroupSize(func, *grid, model.getEpAxes());
  FailureOr<int64_t> dp = verifyGroupSize(func, *grid, model.getDpAxes());
  FailureOr<int64_t> intra = verifyGroupSize(func, *grid, model.getIntraAxes());
  SmallVector<int16_t> allAxes;
  for (int64_t axis = 0, e = grid->getRank(); axis < e; ++axis)
    allAxes.push_back(axis);
  FailureOr<int64_t> world = verifyGroupSize(func, *grid, allAxes);
  if (failed(ep) || failed(dp) || failed(intra) || failed(world))
    return failure();
  stats.epSize = *ep;
  stats.dpSize = *dp;
  stats.intraSize = *intra;
  stats.worldSize = *world;

  // Weights used inside a block belong to it; the rest are "outer".
  llvm::SetVector<Value> seenInBlocks;
  func->walk([&](BlockOp block) {
    WeightSets sets;
    sets.collect(block);
    BlockStats b;
    b.index = block.getIndex();
    b.denseParams = WeightSets::count(sets.dense);
    b.allReduceBytes = WeightSets::bytes(sets.dense);
    b.localExpertParams = WeightSets::count(sets.expert);
    block.walk([&](DispatchOp dispatch) {
      ++b.numDispatches;
      if (!dispatch.getCapacity()) {
        b.dispatchBytesPerRank = -1;
        return;
      }
      auto input = cast<ShapedType>(dispatch.getInput().getType());
      int64_t slot =
          input.getDimSize(2) * ((input.getElementTypeBitWidth() + 7) / 8);
      if (b.dispatchBytesPerRank >= 0)
        b.dispatchBytesPerRank +=
            dispatch.getNumExperts() *
            *routingShape(dispatch)->slotCount * slot;
    });
    seenInBlocks.insert(sets.dense.begin(), sets.dense.end());
    seenInBlocks.insert(sets.expert.begin(), sets.expert.end());
    stats.blocks.push_back(b);
  });

  WeightSets outer;
  outer.collect(func);
  for (Value v : outer.dense)
    if (!seenInBlocks.contains(v))
      stats.outerDenseParams += numElements(v);
  return stats;
}
