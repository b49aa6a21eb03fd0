//===- GradientGroups.cpp - which ranks share a parameter's gradient ------===//

#include "moe/Analysis/GradientGroups.h"

using namespace mlir;
using namespace mlir::moe;

GradientGroups mlir::moe::gradientGroups(FunctionOpInterface func,
                                         ModelAttr model,
                                         BlockArgument param) {
  GradientGroups g;
  unsigned i = param.getArgNumber();
  g.expert = llvm::any_of(param.getUsers(),
                          [](Operation *user) { return isa<ExpertOp>(user); });
  g.headShard = bool(func.getArgAttr(i, MoeDialect::getHeadShardAttrName()));
  ArrayRef<int16_t> intra = model.getIntraAxes();
  if (g.expert) {
    g.distinct.assign(model.getEpAxes().begin(), model.getEpAxes().end());
    if (func.getArgAttr(i, MoeDialect::getHiddenShardAttrName()))
      for (int16_t a : intra)
        if (!llvm::is_contained(g.distinct, a))
          g.distinct.push_back(a);
    return g;
  }
  for (int16_t a : model.getDpAxes())
    if (!g.headShard || !llvm::is_contained(intra, a))
      g.reduce.push_back(a);
  if (g.headShard)
    g.distinct.assign(intra.begin(), intra.end());
  return g;
}

SmallVector<int16_t> mlir::moe::nontrivialAxes(ArrayRef<int16_t> axes,
                                               ArrayRef<int64_t> gridShape) {
  SmallVector<int16_t> out;
  for (int16_t a : axes)
    if (a >= 0 && a < int16_t(gridShape.size()) && gridShape[a] != 1)
      out.push_back(a);
  llvm::sort(out);
  return out;
}
