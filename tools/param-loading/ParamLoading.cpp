//===- ParamLoading.cpp - a step argument's initial values, per rank ------===//
//
// moe-run's argument initialisation, shared with moe-export-params (see
// ParamLoading.h). Nothing here depends on MPI: the rank is a parameter.
//
//===----------------------------------------------------------------------===//

#include "ParamLoading.h"

#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Target/StepState.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>
#include <random>

using namespace mlir;
using namespace mlir::moe;

namespace mlir::moe::run {

static shard::GridOp modelGrid(FunctionOpInterface func, ModelAttr &model) {
  model = func->getAttrOfType<ModelAttr>(MoeDialect::getModelAttrName());
  if (!model)
    return nullptr;
  SymbolTableCollection table;
  return table.lookupNearestSymbolFrom<shard::GridOp>(func.getOperation(),
                                                      model.getGrid());
}

int64_t expertGroupIndex(FunctionOpInterface func, int rank) {
  ModelAttr model;
  shard::GridOp grid = modelGrid(func, model);
  if (!grid)
    return 0;
  ArrayRef<int64_t> shape = grid.getShape();
  std::vector<int64_t> coord(shape.size());
  for (int64_t r = rank, d = shape.size() - 1; d >= 0; --d) {
    coord[d] = r % shape[d];
    r /= shape[d];
  }
  int64_t index = 0;
  for (int16_t a : model.getEpAxes())
    index = index * shape[a] + coord[a];
  return index;
}

llvm::Expected<LoadedStep> loadScheduledStep(llvm::StringRef path,
                                             MLIRContext &context) {
  DialectRegistry registry;
  registry.insert<MoeDialect, arith::ArithDialect, func::FuncDialect,
                  shard::ShardDialect, tensor::TensorDialect>();
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
  LoadedStep step;
  step.module = parseSourceFile<ModuleOp>(path, &context);
  if (!step.module)
    return llvm::createStringError("cannot parse '" + path.str() + "'");
  for (auto f : step.module->getOps<FunctionOpInterface>())
    if (f->hasAttr(MoeDialect::getScheduleAttrName()))
      step.func = f;
  if (!step.func)
    return llvm::createStringError(
        "'" + path.str() +
        "' has no scheduled step (run moe-opt --moe-flowmoe-pipeline)");
  return step;
}

int64_t gridSize(FunctionOpInterface func) {
  ModelAttr model;
  shard::GridOp grid = modelGrid(func, model);
  if (!grid)
    return 0;
  int64_t size = 1;
  for (int64_t d : grid.getShape())
    size *= d;
  return size;
}

std::string argumentName(FunctionOpInterface func, BlockArgument arg) {
  return target::argumentName(func, arg);
}

bool isParameter(FunctionOpInterface func, BlockArgument arg) {
  return static_cast<bool>(func.getArgAttrOfType<StringAttr>(
      arg.getArgNumber(), MoeDialect::getParamAttrName()));
}

/// Parameters: deterministic from their name (replicated weights equal on
/// every rank; expert weights differ per rank, as each holds other
/// experts). Token ids and labels: per rank.
llvm::Expected<InitialValues> initialValues(FunctionOpInterface func,
                                            BlockArgument arg, int rank,
                                            uint64_t seed,
                                            frontend::WeightLoader *sources) {
  // Messages as moe-run has always printed them (tests match them).
  auto fail = [](const std::string &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  auto type = dyn_cast<RankedTensorType>(arg.getType());
  if (!type)
    return fail("argument '" + argumentName(func, arg) +
                "' is not a ranked tensor");
  if (!type.hasStaticShape())
    return fail("the step has dynamic shapes (dropless routing); bound them "
                "with moe-opt --moe-bound-dropless before "
                "--moe-flowmoe-pipeline");
  InitialValues b;
  b.shape.assign(type.getShape().begin(), type.getShape().end());
  b.isInt = isa<IntegerType>(type.getElementType());
  int64_t numel = 1;
  for (int64_t d : b.shape)
    numel *= d;

  // Optimizer state starts at zero (torch.optim's zero-initialised
  // moments and momentum buffers); step inputs are written before each
  // step.
  if (func.getArgAttr(arg.getArgNumber(), MoeDialect::getStateAttrName()) ||
      func.getArgAttr(arg.getArgNumber(), MoeDialect::getStepInputAttrName())) {
    if (b.isInt)
      b.i.assign(numel, 0);
    else
      b.f.assign(numel, 0.0f);
    return b;
  }
  Block &entry = func.getFunctionBody().front();
  auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                MoeDialect::getParamAttrName());
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
    b.i.resize(numel);
    for (int64_t &v : b.i)
      v = d(rng);
    return b;
  }

  // Imported parameters start from the model's own weights.
  auto source =
      func.getArgAttrOfType<SourceAttr>(arg.getArgNumber(),
                                        MoeDialect::getSourceAttrName());
  if (source && sources) {
    int64_t first = expert && !b.shape.empty()
                        ? expertGroupIndex(func, rank) * b.shape[0]
                        : 0;
    auto values = sources->load(source, b.shape, first);
    if (!values)
      return fail("parameter '" + argumentName(func, arg) +
                  "': " + llvm::toString(values.takeError()));
    b.f = std::move(*values);
    b.fromSource = true;
    return b;
  }
  bool isNormScale = name && name.getValue().ends_with(".scale");
  bool isNormBias = name && name.getValue().ends_with(".bias");
  int64_t fanIn = b.shape.size() >= 2 ? b.shape[b.shape.size() - 2] : 1;
  std::uniform_real_distribution<float> d(-1.0f / std::sqrt(float(fanIn)),
                                          1.0f / std::sqrt(float(fanIn)));
  b.f.resize(numel);
  for (float &v : b.f)
    v = isNormScale  ? 1.0f + 0.1f * d(rng)
        : isNormBias ? 0.1f * d(rng)
                     : d(rng);
  return b;
}

} // namespace mlir::moe::run
