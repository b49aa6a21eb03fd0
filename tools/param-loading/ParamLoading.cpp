//===- ParamLoading.cpp - a step argument's initial values, per rank ------===//
//
// moe-run's argument initialisation, shared with moe-export-params (see
// ParamLoading.h). Nothing here depends on MPI: the rank is a parameter.
//
//===----------------------------------------------------------------------===//

#include "ParamLoading.h"

#include "moe/Dialect/Moe/MoeOps.h"
#include "moe/Target/StepState.h"

#include "moe_rt/expert_placement.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
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

/// Rank's coordinates on the grid (row-major, as shard numbers ranks).
static std::vector<int64_t> coordsOf(ArrayRef<int64_t> shape, int64_t rank) {
  std::vector<int64_t> coord(shape.size());
  for (int64_t r = rank, d = shape.size() - 1; d >= 0; --d) {
    coord[d] = r % shape[d];
    r /= shape[d];
  }
  return coord;
}

/// Rank's index in the group spanned by `axes` (row-major over them).
static int64_t indexOn(ArrayRef<int64_t> shape, ArrayRef<int64_t> coord,
                       ArrayRef<int16_t> axes) {
  int64_t index = 0;
  for (int16_t a : axes)
    index = index * shape[a] + coord[a];
  return index;
}

int64_t expertGroupIndex(FunctionOpInterface func, int rank) {
  ModelAttr model;
  shard::GridOp grid = modelGrid(func, model);
  if (!grid)
    return 0;
  ArrayRef<int64_t> shape = grid.getShape();
  return indexOn(shape, coordsOf(shape, rank), model.getEpAxes());
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

LoadedStep loadScheduledStepOrDie(llvm::StringRef path, MLIRContext &context,
                                  void (*die)(const std::string &)) {
  llvm::Expected<LoadedStep> loaded = loadScheduledStep(path, context);
  if (!loaded) {
    die(llvm::toString(loaded.takeError()));
    std::abort(); // `die` exits; a `die` that returned would be a bug
  }
  return std::move(*loaded);
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

/// A parameter's values drawn from `rng`: uniform(±1/sqrt(fan-in)), norm
/// gains near 1 and biases near 0.
static std::vector<float> drawParameter(StringAttr name,
                                        ArrayRef<int64_t> shape,
                                        std::mt19937_64 &rng) {
  bool isNormScale = name && name.getValue().ends_with(".scale");
  bool isNormBias = name && name.getValue().ends_with(".bias");
  int64_t fanIn = shape.size() >= 2 ? shape[shape.size() - 2] : 1;
  std::uniform_real_distribution<float> d(-1.0f / std::sqrt(float(fanIn)),
                                          1.0f / std::sqrt(float(fanIn)));
  int64_t numel = 1;
  for (int64_t s : shape)
    numel *= s;
  std::vector<float> values(numel);
  for (float &v : values)
    v = isNormScale  ? 1.0f + 0.1f * d(rng)
        : isNormBias ? 0.1f * d(rng)
                     : d(rng);
  return values;
}

/// The expert rng of `rank` for argument `arg` (per rank: each holds other
/// experts).
static std::mt19937_64 drawRng(uint64_t seed, StringAttr name,
                               BlockArgument arg,
                               std::optional<int64_t> rank) {
  uint64_t h = llvm::hash_value(name ? name.getValue() : StringRef("input"));
  return std::mt19937_64(seed ^ h ^ (rank ? (*rank + 1) * 7919 : 0) ^
                         arg.getArgNumber());
}

static std::mt19937_64 expertRng(uint64_t seed, StringAttr name,
                                 BlockArgument arg, int64_t rank) {
  return drawRng(seed, name, arg, rank);
}

/// Copies part `j` of `parts` along `dim` of `whole` (shape `wholeShape`)
/// into `out` (the same shape but `dim`) from element `at` on.
static void copyPart(const std::vector<float> &whole,
                     ArrayRef<int64_t> wholeShape, int64_t dim, int64_t parts,
                     int64_t j, std::vector<float> &out, int64_t at) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i)
    outer *= wholeShape[i];
  for (int64_t i = dim + 1; i < int64_t(wholeShape.size()); ++i)
    inner *= wholeShape[i];
  int64_t width = wholeShape[dim] / parts;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t w = 0; w < width; ++w)
      for (int64_t c = 0; c < inner; ++c)
        out[at + (o * width + w) * inner + c] =
            whole[(o * wholeShape[dim] + j * width + w) * inner + c];
}

/// An expert weight of expert sharding (moe.hidden_shard = [dim, S]): part
/// j (the rank's coordinate on the model's intra axes) along `dim` of the
/// plain step's weights of the node's experts. Those are the S plain ranks
/// of the node (intra coordinate i) one after the other, each drawn as the
/// plain step draws it — or, from a moe.source, the node's experts read
/// whole — so that both steps start from the same model.
static llvm::Expected<std::vector<float>>
shardedExpertValues(FunctionOpInterface func, BlockArgument arg, int rank,
                    uint64_t seed, frontend::WeightLoader *sources,
                    ArrayRef<int64_t> shape, int64_t dim, int64_t shards) {
  ModelAttr model;
  shard::GridOp grid = modelGrid(func, model);
  if (!grid || dim < 1 || dim >= int64_t(shape.size()) || shape[0] % shards)
    return llvm::createStringError(
        "parameter '" + argumentName(func, arg) +
        "': moe.hidden_shard needs the model's grid and a dimension after "
        "the experts");
  ArrayRef<int64_t> gridShape = grid.getShape();
  std::vector<int64_t> coord = coordsOf(gridShape, rank);
  int64_t part = indexOn(gridShape, coord, model.getIntraAxes());
  SmallVector<int64_t> whole(shape.begin(), shape.end());
  whole[dim] *= shards;
  int64_t numel = 1;
  for (int64_t d : shape)
    numel *= d;
  std::vector<float> out(numel);
  auto source = func.getArgAttrOfType<SourceAttr>(
      arg.getArgNumber(), MoeDialect::getSourceAttrName());
  if (source && sources) {
    auto values =
        sources->load(source, whole, expertGroupIndex(func, rank) * shape[0]);
    if (!values)
      return llvm::createStringError("parameter '" + argumentName(func, arg) +
                                     "': " + llvm::toString(values.takeError()));
    copyPart(*values, whole, dim, shards, part, out, 0);
    return out;
  }
  auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                MoeDialect::getParamAttrName());
  whole[0] = shape[0] / shards;
  for (int64_t i = 0; i < shards; ++i) {
    // Plain rank q: this rank's coordinates, intra ones set to i.
    std::vector<int64_t> c = coord;
    for (int64_t rest = i, k = model.getIntraAxes().size() - 1; k >= 0; --k) {
      int16_t a = model.getIntraAxes()[k];
      c[a] = rest % gridShape[a];
      rest /= gridShape[a];
    }
    int64_t q = 0;
    for (int64_t d = 0; d < int64_t(gridShape.size()); ++d)
      q = q * gridShape[d] + c[d];
    std::mt19937_64 rng = expertRng(seed, name, arg, q);
    // Block i holds experts [i whole[0], ...): numel / shards elements each.
    copyPart(drawParameter(name, whole, rng), whole, dim, shards, part, out,
             i * (numel / shards));
  }
  return out;
}

/// The world rank whose expert-parallel index is `index`, its other grid
/// coordinates those of `rank`: where the plain step keeps the experts
/// index S ... of this rank's data-parallel replica.
static int64_t rankWithExpertIndex(FunctionOpInterface func, int rank,
                                   int64_t index) {
  ModelAttr model;
  shard::GridOp grid = modelGrid(func, model);
  if (!grid)
    return index;
  ArrayRef<int64_t> shape = grid.getShape();
  std::vector<int64_t> c = coordsOf(shape, rank);
  ArrayRef<int16_t> axes = model.getEpAxes();
  for (int64_t rest = index, k = int64_t(axes.size()) - 1; k >= 0; --k) {
    c[axes[k]] = rest % shape[axes[k]];
    rest /= shape[axes[k]];
  }
  int64_t q = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    q = q * shape[d] + c[d];
  return q;
}

/// An expert weight under an expert placement: slot s holds expert
/// e = slots[g S + s] as the plain step starts it — local expert e mod S of
/// the rank with expert-parallel index e / S (drawn as that rank draws its
/// block), or expert e of the moe.source.
static llvm::Expected<std::vector<float>>
placedExpertValues(FunctionOpInterface func, BlockArgument arg, int rank,
                   uint64_t seed, frontend::WeightLoader *sources,
                   ArrayRef<int64_t> shape, ArrayRef<int64_t> slots) {
  int64_t S = shape[0], g = expertGroupIndex(func, rank), per = 1;
  for (size_t d = 1; d < shape.size(); ++d)
    per *= shape[d];
  if (S <= 0 || (g + 1) * S > int64_t(slots.size()))
    return llvm::createStringError("parameter '" + argumentName(func, arg) +
                                   "': the expert placement "
                                   "has " +
                                   std::to_string(slots.size()) +
                                   " slots, too few for " + std::to_string(S) +
                                   " experts on expert-parallel rank " +
                                   std::to_string(g));
  std::vector<float> out(S * per);
  auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                MoeDialect::getParamAttrName());
  auto source = func.getArgAttrOfType<SourceAttr>(
      arg.getArgNumber(), MoeDialect::getSourceAttrName());
  SmallVector<int64_t> one(shape.begin(), shape.end());
  one[0] = 1;
  for (int64_t s = 0; s < S; ++s) {
    int64_t e = slots[g * S + s];
    std::vector<float> values;
    if (source && sources) {
      auto loaded = sources->load(source, one, e);
      if (!loaded)
        return llvm::createStringError(
            "parameter '" + argumentName(func, arg) +
            "': " + llvm::toString(loaded.takeError()));
      values = std::move(*loaded);
    } else {
      std::mt19937_64 rng =
          expertRng(seed, name, arg, rankWithExpertIndex(func, rank, e / S));
      std::vector<float> block = drawParameter(name, shape, rng);
      values.assign(block.begin() + (e % S) * per,
                    block.begin() + (e % S + 1) * per);
    }
    std::copy(values.begin(), values.end(), out.begin() + s * per);
  }
  return out;
}

static llvm::Error placementError(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

std::map<int64_t, moe_rt::expert_placement::BlockShape>
placementShapes(FunctionOpInterface step) {
  std::map<int64_t, moe_rt::expert_placement::BlockShape> shapes;
  for (BlockArgument arg : step.getFunctionBody().front().getArguments()) {
    if (target::roleOf(step, arg) != target::ArgRole::stepInput)
      continue;
    int64_t block =
        moe_rt::expert_placement::blockOfSlotsInput(argumentName(step, arg));
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (block >= 0 && type && type.getRank() == 2)
      shapes[block] = {type.getDimSize(0), type.getNumElements()};
  }
  return shapes;
}

llvm::Error
applyExpertPlacement(FunctionOpInterface step, const std::string &map,
                     moe_rt::expert_placement::Placement &placement) {
  auto shapes = placementShapes(step);
  if (shapes.empty())
    return placementError(
        "the step has no expert placement input; schedule it "
        "with --moe-flowmoe-pipeline='expert-placement=1 ...'");
  std::string text = map;
  if (!text.empty() && text[0] == '@') {
    std::ifstream in(text.substr(1));
    if (!in)
      return placementError("cannot read '" + text.substr(1) + "'");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string why =
      moe_rt::expert_placement::applySpec(text, shapes, placement);
  if (!why.empty())
    return placementError(why);
  return llvm::Error::success();
}

/// An attention weight of tensor parallelism (moe.head_shard = [dim, S]):
/// part j (the rank's coordinate on the model's intra axes) along `dim` of
/// the plain step's replicated weight — drawn as the plain step draws it,
/// or read whole from its moe.source — so both steps start from the same
/// model.
static llvm::Expected<std::vector<float>>
headShardValues(FunctionOpInterface func, BlockArgument arg, int rank,
                uint64_t seed, frontend::WeightLoader *sources,
                ArrayRef<int64_t> shape, int64_t dim, int64_t shards) {
  ModelAttr model;
  shard::GridOp grid = modelGrid(func, model);
  if (!grid || dim < 0 || dim >= int64_t(shape.size()))
    return llvm::createStringError(
        "parameter '" + argumentName(func, arg) +
        "': moe.head_shard needs the model's grid and one of its dimensions");
  ArrayRef<int64_t> gridShape = grid.getShape();
  int64_t part =
      indexOn(gridShape, coordsOf(gridShape, rank), model.getIntraAxes());
  SmallVector<int64_t> whole(shape.begin(), shape.end());
  whole[dim] *= shards;
  std::vector<float> values;
  auto source = func.getArgAttrOfType<SourceAttr>(
      arg.getArgNumber(), MoeDialect::getSourceAttrName());
  auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                MoeDialect::getParamAttrName());
  if (source && sources) {
    auto loaded = sources->load(source, whole, 0);
    if (!loaded)
      return llvm::createStringError("parameter '" + argumentName(func, arg) +
                                     "': " +
                                     llvm::toString(loaded.takeError()));
    values = std::move(*loaded);
  } else {
    // The plain step's replicated draw (rank-independent).
    std::mt19937_64 rng = drawRng(seed, name, arg, std::nullopt);
    values = drawParameter(name, whole, rng);
  }
  int64_t numel = 1;
  for (int64_t d : shape)
    numel *= d;
  std::vector<float> out(numel);
  copyPart(values, whole, dim, shards, part, out, 0);
  return out;
}

/// Parameters: deterministic from their name (replicated weights equal on
/// every rank; expert weights differ per rank, as each holds other
/// experts). Token ids and labels: per rank.
llvm::Expected<InitialValues> initialValues(FunctionOpInterface func,
                                            BlockArgument arg, int rank,
                                            uint64_t seed,
                                            frontend::WeightLoader *sources,
                                            const moe_rt::expert_placement::Placement &placement) {
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
  // A shard of the plain step's weight, assembled from the plain step's
  // values: an expert's hidden slice (expert sharding), the experts an
  // expert placement puts in this rank's slots, or an attention weight's
  // heads (tensor parallelism).
  auto hidden = func.getArgAttrOfType<DenseI64ArrayAttr>(
      arg.getArgNumber(), MoeDialect::getHiddenShardAttrName());
  auto heads = func.getArgAttrOfType<DenseI64ArrayAttr>(
      arg.getArgNumber(), MoeDialect::getHeadShardAttrName());
  auto table = expert ? placement.find(target::expertBlock(func, arg))
                      : placement.end();
  bool placed = table != placement.end() && !b.shape.empty();
  if (!b.isInt &&
      ((expert && (hidden || placed)) || (heads && name && !expert))) {
    auto values =
        expert && hidden
            ? shardedExpertValues(func, arg, rank, seed, sources, b.shape,
                                  hidden[0], hidden[1])
        : expert ? placedExpertValues(func, arg, rank, seed, sources, b.shape,
                                      table->second)
                 : headShardValues(func, arg, rank, seed, sources, b.shape,
                                   heads[0], heads[1]);
    if (!values)
      return values.takeError();
    b.f = std::move(*values);
    b.fromSource = sources && func.getArgAttr(arg.getArgNumber(),
                                              MoeDialect::getSourceAttrName());
    return b;
  }
  std::mt19937_64 rng =
      drawRng(seed, name, arg,
              expert || !name ? std::optional<int64_t>(rank) : std::nullopt);
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
  b.f = drawParameter(name, b.shape, rng);
  return b;
}

} // namespace mlir::moe::run
