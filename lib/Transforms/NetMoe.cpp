//===- NetMoe.cpp - NetMoE's dynamic sample placement in the step ---------===//
//
// NetMoE (seeds/002 §3.2, App. A; docs/netmoe-in-the-step.md) on the
// forward model. Per MoE block: counts -> planner -> a combine that sends
// every expert output row to its sample's new rank, the residual inlined
// into the dispatch so that it arrives there too, and the labels moved
// with their samples. moe-build-train-step then differentiates the placing
// combine like any op: its vjp reuses the placement.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Transforms/PassUtils.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOENETMOE
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// The MoE layer of one block: x -> norm -> gate -> dispatch -> expert ->
/// combine -> x + combine.
struct MoeLayer {
  GateOp gate;
  DispatchOp dispatch;
  NormOp norm;
  ExpertOp expert;
  CombineOp combine;
  arith::AddFOp residualAdd;
};

/// Finds the block's MoE layer, or says (on the block) what NetMoE cannot
/// place there.
FailureOr<MoeLayer> findLayer(BlockOp block) {
  auto fail = [&](const Twine &why) {
    return block.emitOpError() << "moe-netmoe: " << why;
  };
  MoeLayer m;
  for (Operation &op : block.getBody().front()) {
    if (isa<SharedExpertOp, SigmoidGateOp>(op))
      return fail("a shared expert's output stays on the sample's old rank; "
                  "NetMoE places blocks without one");
    if (auto d = dyn_cast<DispatchOp>(op)) {
      if (m.dispatch)
        return fail("more than one dispatch");
      m.dispatch = d;
    }
  }
  if (!m.dispatch)
    return fail("no moe.dispatch");
  m.gate = m.dispatch.getIndices().getDefiningOp<GateOp>();
  if (!m.gate || m.gate.isExpertChoice() || !m.gate.isDropless())
    return fail("NetMoE places samples under dropless token-choice routing "
                "(with a capacity a dropped token has no row to carry its "
                "sample's residual)");
  if (m.gate.getKind() == GateKind::noisy_topk)
    return fail("noisy_topk draws its noise by sample index; a moved sample "
                "would draw another");
  m.norm = m.dispatch.getInput().getDefiningOp<NormOp>();
  if (!m.norm || m.gate.getInput() != m.norm.getResult())
    return fail("the dispatch and the gate must read one norm of the "
                "residual stream (a pre-norm block)");
  if (!m.dispatch.getResult().hasOneUse() ||
      !(m.expert = dyn_cast<ExpertOp>(*m.dispatch.getResult().user_begin())))
    return fail("the dispatch must feed one moe.expert");
  if (!m.expert.getResult().hasOneUse() ||
      !(m.combine =
            dyn_cast<CombineOp>(*m.expert.getResult().user_begin())) ||
      m.combine.getPlacement())
    return fail("the experts must feed one moe.combine that places nothing");
  Value x = m.norm.getInput();
  if (!m.combine.getResult().hasOneUse() ||
      !(m.residualAdd = dyn_cast<arith::AddFOp>(
            *m.combine.getResult().user_begin())) ||
      !llvm::is_contained(m.residualAdd->getOperands(), x))
    return fail("the combine's only use must be the residual add of the "
                "norm's input");
  return m;
}

struct NetMoePass : public moe::impl::MoeNetMoeBase<NetMoePass> {
  using MoeNetMoeBase::MoeNetMoeBase;

  /// Rewrites one block's MoE layer; returns the placement.
  Value placeLayer(MoeLayer &m) {
    OpBuilder b(m.dispatch->getContext());
    b.setInsertionPointAfter(m.dispatch);
    Location loc = m.dispatch.getLoc();
    auto indices = cast<RankedTensorType>(m.gate.getIndices().getType());
    // The group's counts and the placement right after the dispatch, in its
    // task (D_r^l) on the communication stream: the solve then runs on a
    // host thread while the experts compute, joined by the combine.
    SymbolTableCollection table;
    int64_t group = *verifyGroupSize(
        m.dispatch, *lookupGrid(m.dispatch, m.dispatch.getGridAttr(), table),
        m.dispatch.getAxes());
    int64_t samples = group * indices.getDimSize(0);
    auto counts = RoutingCountsOp::create(
        b, loc,
        RankedTensorType::get({samples, int64_t(m.dispatch.getNumExperts())},
                              indices.getElementType()),
        m.gate.getIndices(), m.dispatch.getGridAttr(),
        m.dispatch.getAxesAttr(), m.dispatch.getNumExpertsAttr());
    auto plan = PlanPlacementOp::create(
        b, loc, RankedTensorType::get({samples}, indices.getElementType()),
        counts, m.dispatch.getGridAttr(), m.dispatch.getAxesAttr(),
        m.dispatch.getNumExpertsAttr(),
        identity ? b.getUnitAttr() : UnitAttr(),
        predict ? UnitAttr() : b.getUnitAttr());
    Value x = m.norm.getInput();
    if (follow == "no-residual") {
      // Test only: the residual stays on the sample's old rank.
      m.combine.getPlacementMutable().assign(plan);
      return plan;
    }
    // App. A: the dispatch sends x, the experts normalise it on their side,
    // the combine adds x once (first choice) and places the sum.
    m.dispatch.getInputMutable().assign(x);
    b.setInsertionPoint(m.expert);
    Operation *expertNorm = b.clone(*m.norm);
    expertNorm->setOperand(0, m.dispatch.getResult());
    expertNorm->getResult(0).setType(m.dispatch.getResult().getType());
    m.expert.getInputMutable().assign(expertNorm->getResult(0));
    m.combine.getResidualMutable().assign(m.dispatch.getResult());
    m.combine.getPlacementMutable().assign(plan);
    m.residualAdd.getResult().replaceAllUsesWith(m.combine.getResult());
    m.residualAdd.erase();
    return plan;
  }

  /// Gives `block` the labels as one more input and result, moved by the
  /// block's placement; returns the new block.
  BlockOp threadLabels(BlockOp block, Value labels, Value place) {
    OpBuilder b(block);
    SmallVector<Value> inputs(block.getInputs());
    inputs.push_back(labels);
    SmallVector<Type> types(block.getResultTypes());
    types.push_back(labels.getType());
    auto fresh = BlockOp::create(b, block.getLoc(), block.getIndex(), inputs,
                                 types);
    fresh.getBody().takeBody(block.getBody());
    Block &body = fresh.getBody().front();
    BlockArgument arg = body.addArgument(labels.getType(), labels.getLoc());
    auto yield = cast<YieldOp>(body.getTerminator());
    Value moved = arg;
    if (follow != "no-labels") {
      OpBuilder inner(yield);
      auto plan = place.getDefiningOp<PlanPlacementOp>();
      moved = MoveSamplesOp::create(inner, yield.getLoc(), labels.getType(),
                                    arg, place, plan.getGridAttr(),
                                    plan.getAxesAttr());
    }
    yield->insertOperands(yield->getNumOperands(), moved);
    for (auto [from, to] : llvm::zip(block.getResults(), fresh.getResults()))
      from.replaceAllUsesWith(to);
    block.erase();
    return fresh;
  }

  LogicalResult runOnFunction(FunctionOpInterface func) {
    Block &entry = func.getFunctionBody().front();
    SmallVector<BlockOp> blocks(entry.getOps<BlockOp>());
    SmallVector<CrossEntropyOp> losses(entry.getOps<CrossEntropyOp>());
    if (blocks.empty())
      return success();
    if (losses.size() != 1)
      return func.emitOpError()
             << "moe-netmoe: needs one moe.cross_entropy for the labels to "
                "follow the samples to";
    Value labels = losses.front().getLabels();
    for (BlockOp block : blocks) {
      FailureOr<MoeLayer> layer = findLayer(block);
      if (failed(layer))
        return failure();
      Value place = placeLayer(*layer);
      BlockOp fresh = threadLabels(block, labels, place);
      labels = fresh.getResults().back();
    }
    losses.front().getLabelsMutable().assign(labels);
    return success();
  }

  void runOnOperation() override {
    if (follow != "all" && follow != "no-residual" && follow != "no-labels") {
      getOperation().emitError()
          << "moe-netmoe: follow must be all, no-residual or no-labels, got '"
          << follow << "'";
      return signalPassFailure();
    }
    for (auto func : getOperation().getOps<FunctionOpInterface>())
      if (func->hasAttr("moe.model") && !func.isExternal() &&
          failed(runOnFunction(func)))
        return signalPassFailure();
  }
};

} // namespace
