//===- MoeOps.cpp - moe dialect operations --------------------------------===//
//
// Local verifiers: each op checks that its operand and result shapes chain
// (FlowMoE's B, N, M, H, E, k, C notation) and names the offending operand.
// Checks that need the device grid live in verifySymbolTable; checks against
// the model's hyper-parameters live in ModelVerifier.cpp.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/MoeOps.h"

#include "ShapeDiagnostics.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/SmallSet.h"

#include <cmath>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

#include "moe/Dialect/Moe/MoeInterfaces.cpp.inc"

static ShapedType shapeOf(Value value) {
  return cast<ShapedType>(value.getType());
}

//===----------------------------------------------------------------------===//
// Custom assembly directives
//===----------------------------------------------------------------------===//

/// `capacity_factor = 1.2` in short decimal form (F64Attr would print
/// 1.200000e+00), or nothing when absent.
static ParseResult parseCapacityFactor(OpAsmParser &parser, FloatAttr &attr) {
  if (failed(parser.parseOptionalKeyword("capacity_factor")))
    return success();
  double value;
  if (parser.parseEqual() || parser.parseFloat(value))
    return failure();
  attr = parser.getBuilder().getF64FloatAttr(value);
  return success();
}

static void printCapacityFactor(OpAsmPrinter &printer, Operation *,
                                FloatAttr attr) {
  if (attr)
    printer << "capacity_factor = " << formatDouble(attr.getValueAsDouble());
}

//===----------------------------------------------------------------------===//
// Groups
//===----------------------------------------------------------------------===//

FailureOr<shard::GridOp>
mlir::moe::lookupGrid(Operation *from, FlatSymbolRefAttr grid,
                      SymbolTableCollection &symbolTable) {
  auto gridOp = symbolTable.lookupNearestSymbolFrom<shard::GridOp>(from, grid);
  if (!gridOp)
    return from->emitError() << "device grid " << grid
                             << " is not defined (expected a shard.grid)";
  return gridOp;
}

FailureOr<int64_t> mlir::moe::verifyGroupSize(Operation *from,
                                              shard::GridOp grid,
                                              ArrayRef<int16_t> axes) {
  ArrayRef<int64_t> shape = grid.getShape();
  llvm::SmallSet<int16_t, 4> seen;
  int64_t size = 1;
  for (int16_t axis : axes) {
    if (axis < 0 || axis >= static_cast<int64_t>(shape.size()))
      return from->emitError()
             << "grid axis " << axis << " is out of range for grid @"
             << grid.getSymName() << " of shape " << formatShape(shape);
    if (!seen.insert(axis).second)
      return from->emitError() << "grid axis " << axis << " is repeated";
    if (ShapedType::isDynamic(shape[axis]))
      return from->emitError()
             << "grid @" << grid.getSymName() << " has a dynamic size on axis "
             << axis << "; a group needs a static size";
    size *= shape[axis];
  }
  return size;
}

FailureOr<int64_t>
mlir::moe::collectiveGroupSize(CollectiveOpInterface op,
                               SymbolTableCollection &table) {
  FailureOr<shard::GridOp> grid =
      lookupGrid(op.getOperation(), op.getGridAttr(), table);
  if (failed(grid))
    return failure();
  if (op.getAxes().empty())
    return op->emitOpError() << "needs at least one grid axis for its group";
  return verifyGroupSize(op.getOperation(), *grid, op.getAxes());
}

/// Shared by dispatch and combine: the expert-side tensor is
/// E_l x (G*C) x M with E_l = E / G.
static LogicalResult verifyExpertSideLayout(Operation *op, StringRef name,
                                            ShapedType expertSide,
                                            int64_t numExperts,
                                            std::optional<int64_t> capacity,
                                            int64_t groupSize) {
  if (numExperts % groupSize != 0)
    return op->emitOpError()
           << numExperts << " experts cannot be spread "
           << "evenly over a group of " << groupSize << " ranks";
  if (failed(verifyDim(op, name, expertSide, 0, numExperts / groupSize,
                       "local experts E/G")))
    return failure();
  std::optional<RoutingShape> shape = routingShape(op);
  if (capacity && shape && shape->isWindow())
    return verifyDim(op, name, expertSide, 1, groupSize * *shape->slotCount,
                     "G x the window's slots");
  if (capacity &&
      failed(verifyDim(op, name, expertSide, 1, groupSize * *capacity,
                       "G x capacity slots")))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Regions whose arguments are bound to operands (moe.block, moe.vjp)
//===----------------------------------------------------------------------===//

/// `(%arg = %operand : type, ...)`: region arguments and the operands they
/// are bound to.
static ParseResult
parseBoundArguments(OpAsmParser &parser,
                    SmallVectorImpl<OpAsmParser::Argument> &args,
                    SmallVectorImpl<OpAsmParser::UnresolvedOperand> &operands) {
  return parser.parseCommaSeparatedList(
      OpAsmParser::Delimiter::Paren, [&]() -> ParseResult {
        OpAsmParser::Argument arg;
        OpAsmParser::UnresolvedOperand operand;
        if (parser.parseArgument(arg) || parser.parseEqual() ||
            parser.parseOperand(operand) || parser.parseColon() ||
            parser.parseType(arg.type))
          return failure();
        args.push_back(arg);
        operands.push_back(operand);
        return success();
      });
}

static void printBoundArguments(OpAsmPrinter &p, ValueRange args,
                                ValueRange operands) {
  p << "(";
  llvm::interleaveComma(llvm::zip(args, operands), p, [&](auto pair) {
    p << std::get<0>(pair) << " = " << std::get<1>(pair) << " : "
      << std::get<1>(pair).getType();
  });
  p << ")";
}

/// The region's arguments match the operands bound to them, in number and
/// type; `what` names the operands ("input", "primal").
static LogicalResult verifyBoundArguments(Operation *op, StringRef what,
                                          Block &body, ValueRange operands) {
  if (body.getNumArguments() != operands.size())
    return op->emitOpError() << "has " << operands.size() << " " << what
                             << "s but its region takes "
                             << body.getNumArguments() << " arguments";
  for (auto [i, arg, operand] : llvm::enumerate(body.getArguments(), operands))
    if (arg.getType() != operand.getType())
      return op->emitOpError() << "region argument #" << i << " has type "
                               << arg.getType() << " but " << what << " #" << i
                               << " has type " << operand.getType();
  return success();
}

//===----------------------------------------------------------------------===//
// BlockOp
//===----------------------------------------------------------------------===//

void BlockOp::build(OpBuilder &builder, OperationState &state, int64_t index,
                    ValueRange inputs, TypeRange resultTypes) {
  state.addOperands(inputs);
  state.getOrAddProperties<Properties>().index =
      builder.getI64IntegerAttr(index);
  state.addTypes(resultTypes);
  Region *body = state.addRegion();
  Block *block = new Block();
  body->push_back(block);
  for (Value input : inputs)
    block->addArgument(input.getType(), input.getLoc());
}

// moe.block <index> (%arg = %operand : type, ...) -> (types) attributes {..} {
ParseResult BlockOp::parse(OpAsmParser &parser, OperationState &result) {
  int64_t index;
  if (parser.parseInteger(index))
    return failure();
  result.getOrAddProperties<Properties>().index =
      parser.getBuilder().getI64IntegerAttr(index);

  SmallVector<OpAsmParser::Argument> args;
  SmallVector<OpAsmParser::UnresolvedOperand> operands;
  if (parseBoundArguments(parser, args, operands))
    return failure();
  for (auto [arg, operand] : llvm::zip(args, operands))
    if (parser.resolveOperand(operand, arg.type, result.operands))
      return failure();

  if (parser.parseOptionalArrowTypeList(result.types) ||
      parser.parseOptionalAttrDictWithKeyword(result.attributes))
    return failure();
  Region *body = result.addRegion();
  if (parser.parseRegion(*body, args))
    return failure();
  BlockOp::ensureTerminator(*body, parser.getBuilder(), result.location);
  return success();
}

void BlockOp::print(OpAsmPrinter &p) {
  p << " " << getIndex() << " ";
  printBoundArguments(p, getBody().getArguments(), getInputs());
  if (getNumResults()) {
    p << " -> ";
    if (getNumResults() == 1)
      p << getResult(0).getType();
    else {
      p << "(";
      llvm::interleaveComma(getResultTypes(), p);
      p << ")";
    }
  }
  p.printOptionalAttrDictWithKeyword((*this)->getAttrs(), {"index"});
  p << " ";
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false,
                /*printBlockTerminators=*/getNumResults() > 0);
}

LogicalResult BlockOp::verify() {
  return verifyBoundArguments(*this, "input", getBody().front(), getInputs());
}

LogicalResult YieldOp::verify() {
  // A moe.vjp checks its own yield (it must return its op's results).
  auto block = dyn_cast<BlockOp>((*this)->getParentOp());
  if (!block)
    return success();
  if (getOperandTypes() != block.getResultTypes())
    return emitOpError() << "yields " << getNumOperands()
                         << " values whose types do not match the "
                         << block.getNumResults()
                         << " results of the enclosing moe.block";
  return success();
}

//===----------------------------------------------------------------------===//
// Dense layers
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  ShapedType ids = shapeOf(getIds()), table = shapeOf(getTable()),
             result = shapeOf(getResult());
  if (failed(verifyRank(*this, "table", table, 2)))
    return failure();
  SmallVector<int64_t> expected(ids.getShape());
  expected.push_back(table.getDimSize(1));
  return verifyShape(*this, "result", result, expected);
}

LogicalResult PositionEmbeddingOp::verify() {
  ShapedType input = shapeOf(getInput()), table = shapeOf(getTable());
  if (failed(verifyRank(*this, "input", input, 3)) ||
      failed(verifyRank(*this, "table", table, 2)) ||
      failed(verifyDim(*this, "table", table, 1, input.getDimSize(2),
                          "the embedding size M")))
    return failure();
  int64_t positions = table.getDimSize(0), seq = input.getDimSize(1);
  if (!ShapedType::isDynamic(positions) && !ShapedType::isDynamic(seq) &&
      positions < seq)
    return emitOpError() << "table has " << positions
                         << " positions, fewer than the sequence length "
                         << seq;
  if (getResult().getType() != getInput().getType())
    return emitOpError() << "result type " << getResult().getType()
                         << " must equal the input type "
                         << getInput().getType();
  return success();
}

LogicalResult NormOp::verify() {
  ShapedType input = shapeOf(getInput());
  if (input.getRank() < 1)
    return emitOpError() << "'input' must have rank >= 1";
  int64_t features = input.getDimSize(input.getRank() - 1);
  if (failed(verifyShape(*this, "scale", shapeOf(getScale()), {features})))
    return failure();
  if (getBias()) {
    if (getKind() == NormKind::rms)
      return emitOpError() << "rms norm takes no bias";
    if (failed(verifyShape(*this, "bias", shapeOf(getBias()), {features})))
      return failure();
  }
  if (getEpsilon().convertToDouble() <= 0.0)
    return emitOpError() << "epsilon must be positive";
  if (getResult().getType() != getInput().getType())
    return emitOpError() << "result type must equal the input type";
  return success();
}

LogicalResult AttentionOp::verifyRotary() {
  if (getClipQkv() && !(getClipBound() > 0.0 && std::isfinite(getClipBound())))
    return emitOpError() << "clip_qkv must be positive and finite, got "
                         << getClipBound();
  if (!getRotary() && (getLayout() || getTheta()))
    return emitOpError() << "has a rotary layout or theta but no rotary";
  if (getRotary() && getHeadDim() % 2)
    return emitOpError() << "rotary needs an even head_dim, got "
                         << getHeadDim();
  double theta = getRotaryTheta();
  if (!(theta > 0.0) || !std::isfinite(theta))
    return emitOpError() << "rotary theta must be positive and finite, got "
                         << theta;
  return success();
}

LogicalResult AttentionOp::verifyBiases() {
  int64_t m = shapeOf(getInput()).getDimSize(2),
          q = getNumHeads() * getHeadDim(),
          kv = getNumKvHeads() * getHeadDim();
  size_t n = getQkvBias().size();
  if (n != 0 && n != 3)
    return emitOpError() << "qkv_bias takes the Q, K and V biases (3), got "
                         << n;
  if (n == 3 &&
      (failed(verifyShape(*this, "bq", shapeOf(getBq()), {q})) ||
       failed(verifyShape(*this, "bk", shapeOf(getBk()), {kv})) ||
       failed(verifyShape(*this, "bv", shapeOf(getBv()), {kv}))))
    return failure();
  if (getOutBias() &&
      failed(verifyShape(*this, "out_bias", shapeOf(getOutBias()), {m})))
    return failure();
  return success();
}

LogicalResult LinearOp::verify() {
  ShapedType input = shapeOf(getInput()), weight = shapeOf(getWeight());
  if (input.getRank() < 1)
    return emitOpError() << "'input' must have rank >= 1";
  if (failed(verifyRank(*this, "weight", weight, 2)) ||
      failed(verifyDim(*this, "weight", weight, 0,
                       input.getDimSize(input.getRank() - 1),
                       "input features")))
    return failure();
  if (getBias() && failed(verifyShape(*this, "bias", shapeOf(getBias()),
                                      {weight.getDimSize(1)})))
    return failure();
  SmallVector<int64_t> expected(input.getShape().drop_back());
  expected.push_back(weight.getDimSize(1));
  return verifyShape(*this, "result", shapeOf(getResult()), expected);
}

LogicalResult BiasAddOp::verify() {
  ShapedType input = shapeOf(getInput());
  if (input.getRank() < 1)
    return emitOpError() << "'input' must have rank >= 1";
  if (failed(verifyShape(*this, "bias", shapeOf(getBias()),
                         {input.getDimSize(input.getRank() - 1)})))
    return failure();
  if (getResult().getType() != getInput().getType())
    return emitOpError() << "result type " << getResult().getType()
                         << " must equal the input type "
                         << getInput().getType();
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  ShapedType logits = shapeOf(getLogits()), labels = shapeOf(getLabels());
  if (logits.getRank() < 2)
    return emitOpError() << "'logits' must have rank >= 2 (tokens x vocab)";
  return verifyShape(*this, "labels", labels, logits.getShape().drop_back());
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::verify() {
  ShapedType input = shapeOf(getInput());
  if (failed(verifyRank(*this, "input", input, 3)))
    return failure();
  int64_t heads = getNumHeads(), kvHeads = getNumKvHeads(), dim = getHeadDim();
  if (heads % kvHeads != 0)
    return emitOpError() << "num_heads (" << heads
                         << ") must be a multiple of num_kv_heads (" << kvHeads
                         << ")";
  int64_t m = input.getDimSize(2);
  if (failed(verifyShape(*this, "wq", shapeOf(getWq()), {m, heads * dim})) ||
      failed(verifyShape(*this, "wk", shapeOf(getWk()), {m, kvHeads * dim})) ||
      failed(verifyShape(*this, "wv", shapeOf(getWv()), {m, kvHeads * dim})) ||
      failed(verifyShape(*this, "wo", shapeOf(getWo()), {heads * dim, m})))
    return failure();

  auto params = getNormParams();
  std::optional<NormKind> norm = getNorm();
  if (!norm && !params.empty())
    return emitOpError() << "has norm parameters but no prenorm kind";
  if (norm) {
    size_t maxParams = *norm == NormKind::layer ? 2 : 1;
    if (params.empty() || params.size() > maxParams)
      return emitOpError() << stringifyNormKind(*norm)
                           << " prenorm takes a scale"
                           << (maxParams == 2 ? " and an optional bias" : "")
                           << ", got " << params.size() << " parameters";
    for (Value param : params)
      if (failed(verifyShape(*this, "prenorm parameter", shapeOf(param), {m})))
        return failure();
  }
  if (getEpsilon().convertToDouble() <= 0.0)
    return emitOpError() << "epsilon must be positive";
  if (getResult().getType() != getInput().getType())
    return emitOpError() << "result type must equal the input type";
  if (failed(verifyRotary()))
    return failure();
  return verifyBiases();
}

//===----------------------------------------------------------------------===//
// GateOp
//===----------------------------------------------------------------------===//

LogicalResult GateOp::verify() {
  ShapedType input = shapeOf(getInput()), weight = shapeOf(getWeight());
  if (failed(verifyRank(*this, "input", input, 3)) ||
      failed(verifyRank(*this, "weight", weight, 2)))
    return failure();
  int64_t b = input.getDimSize(0), n = input.getDimSize(1),
          m = input.getDimSize(2), e = getNumExperts(), k = getTopK();
  if (k > e)
    return emitOpError() << "top_k (k = " << k
                         << ") exceeds the number of experts (" << e << ")";

  // Router weights per kind (FSMoE §2.1).
  GateKind kind = getKind();
  Value aux = getAuxWeight();
  if (kind == GateKind::cosine) {
    if (!aux)
      return emitOpError() << "cosine gate needs the projection W_proj "
                              "(M x d) as aux";
    ShapedType proj = shapeOf(aux);
    if (failed(verifyRank(*this, "aux", proj, 2)) ||
        failed(verifyDim(*this, "aux", proj, 0, m, "embedding M")) ||
        failed(verifyShape(*this, "weight", weight, {proj.getDimSize(1), e})))
      return failure();
  } else {
    if (failed(verifyShape(*this, "weight", weight, {m, e})))
      return failure();
    if (kind == GateKind::noisy_topk) {
      if (!aux)
        return emitOpError() << "noisy_topk gate needs the noise weight "
                                "W_noise (M x E) as aux";
      if (failed(verifyShape(*this, "aux", shapeOf(aux), {m, e})))
        return failure();
    } else if (aux) {
      return emitOpError() << stringifyGateKind(kind)
                           << " gate takes no aux weight";
    }
  }
  if (getNormalize() && kind != GateKind::softmax_topk &&
      kind != GateKind::noisy_topk)
    return emitOpError() << "normalize applies to softmax_topk and "
                            "noisy_topk gates only";
  if (std::optional<llvm::APFloat> tau = getTau()) {
    if (kind != GateKind::cosine)
      return emitOpError() << "tau applies to cosine gates only";
    if (!(tau->convertToDouble() > 0.0))
      return emitOpError() << "tau must be positive, got "
                           << formatDouble(tau->convertToDouble());
  }
  if (std::optional<int64_t> offset = getSampleOffset()) {
    if (kind != GateKind::noisy_topk)
      return emitOpError() << "sample_offset applies to noisy_topk gates only";
    if (*offset < 0)
      return emitOpError() << "sample_offset must not be negative, got "
                           << *offset;
  }

  // Capacity: C = ceil(f * k * B * N / E), FlowMoE §2.2.
  std::optional<double> factor;
  if (auto f = getCapacityFactor())
    factor = f->convertToDouble();
  std::optional<int64_t> capacity = getCapacity();
  if (factor.has_value() != capacity.has_value())
    return emitOpError() << "capacity_factor and capacity must be given "
                            "together (or neither, for dropless routing)";
  if (factor) {
    if (!(*factor > 0.0))
      return emitOpError() << "capacity_factor must be positive";
    if (!ShapedType::isDynamic(b) && !ShapedType::isDynamic(n)) {
      int64_t expected = expertCapacity(*factor, k, b * n, e);
      if (*capacity != expected)
        return emitOpError()
               << "capacity " << *capacity << " does not match ceil(f*k*B*N/E)"
               << " = ceil(" << formatDouble(*factor) << "*" << k << "*" << b
               << "*" << n << "/" << e << ") = " << expected;
    }
  } else if (isExpertChoice()) {
    return emitOpError() << "expert_choice gate needs a capacity_factor";
  }

  ShapedType indices = shapeOf(getIndices()), weights = shapeOf(getWeights());
  SmallVector<int64_t> routeShape = isExpertChoice()
                                        ? SmallVector<int64_t>{e, *capacity}
                                        : SmallVector<int64_t>{b, n, k};
  if (failed(verifyShape(*this, "indices", indices, routeShape)) ||
      failed(verifyShape(*this, "weights", weights, routeShape)) ||
      failed(verifyShape(*this, "counts", shapeOf(getCounts()), {e})))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Dispatch / combine
//===----------------------------------------------------------------------===//

/// Token-side routing tensors: B x N x k (token choice) or E x C (expert
/// choice, the tokens each expert picked).
static LogicalResult verifyRouting(Operation *op, ShapedType tokens,
                                   ShapedType indices, ShapedType counts,
                                   int64_t numExperts,
                                   std::optional<int64_t> capacity) {
  if (failed(verifyShape(op, "counts", counts, {numExperts})))
    return failure();
  if (indices.getRank() == 3)
    return success(succeeded(verifyDim(op, "indices", indices, 0,
                                       tokens.getDimSize(0), "batch B")) &&
                   succeeded(verifyDim(op, "indices", indices, 1,
                                       tokens.getDimSize(1), "tokens N")));
  if (indices.getRank() == 2) {
    if (!capacity)
      return op->emitOpError() << "expert-choice routing (E x C indices) "
                                  "needs a capacity";
    return verifyShape(op, "indices", indices, {numExperts, *capacity});
  }
  return op->emitOpError() << "'indices' must be B x N x k (token choice) or "
                              "E x C (expert choice), got "
                           << formatShape(indices.getShape());
}

/// `rows`, when given (variable-count routing), is dropless and describes
/// the expert side: E_l x G integers.
static LogicalResult verifyCapacityMatchesSlots(Operation *op,
                                                ShapedType expertSide,
                                                std::optional<int64_t> cap,
                                                Value rows = {}) {
  if (cap && *cap <= 0)
    return op->emitOpError() << "capacity must be positive, got " << *cap;
  if (rows) {
    if (cap)
      return op->emitOpError() << "variable-count routing ('rows') is "
                                  "dropless and takes no capacity";
    if (failed(verifyRank(op, "rows", shapeOf(rows), 2)))
      return failure();
    return verifyDim(op, "rows", shapeOf(rows), 0, expertSide.getDimSize(0),
                     "local experts E_l");
  }
  if (!cap && !expertSide.isDynamicDim(1))
    return op->emitOpError() << "dropless routing needs a dynamic slot "
                                "dimension (E_l x ? x M), or 'rows' and a "
                                "bound (variable-count)";
  return success();
}

/// `slots [first, count]`: a window inside the capacity, token choice only.
static LogicalResult verifySlotWindow(Operation *op,
                                     std::optional<ArrayRef<int64_t>> slots,
                                     std::optional<int64_t> capacity,
                                     ShapedType indices) {
  if (!slots)
    return success();
  if (!capacity)
    return op->emitOpError() << "'slots' needs a capacity: dropless routing "
                                "has no slots to chunk";
  if (slots->size() != 2)
    return op->emitOpError() << "'slots' must be [first, count]";
  int64_t first = (*slots)[0], count = (*slots)[1];
  if (first < 0 || count <= 0 || first + count > *capacity)
    return op->emitOpError()
           << "slots [" << first << ", " << count << "] are not a non-empty "
           << "window inside the capacity " << *capacity;
  if (indices.getRank() != 3)
    return op->emitOpError() << "'slots' needs token-choice routing (B x N x "
                                "k indices)";
  return success();
}

/// `part [j, r]`: token chunk j of r of a variable-count op (`rows`), which
/// is not also a slot window or a placing combine.
static LogicalResult verifyTokenPart(Operation *op,
                                     std::optional<ArrayRef<int64_t>> part,
                                     bool variable, bool placing) {
  if (!part)
    return success();
  if (!variable)
    return op->emitOpError() << "'part' needs variable-count routing ('rows' "
                                "and a bound; moe-variable-dropless): with a "
                                "capacity use 'slots'";
  if (part->size() != 2 || (*part)[1] < 1 || (*part)[0] < 0 ||
      (*part)[0] >= (*part)[1])
    return op->emitOpError() << "'part' must be [j, r] with 0 <= j < r";
  if (placing)
    return op->emitOpError() << "'part' cannot be combined with a sample "
                                "placement ('to')";
  return success();
}

/// `rows` of a variable-count op has one column per rank of the group.
static LogicalResult verifyRowsOverGroup(Operation *op, Value rows,
                                         int64_t groupSize) {
  if (!rows)
    return success();
  return verifyDim(op, "rows", shapeOf(rows), 1, groupSize, "group size G");
}

/// `expert_slots(%t)`: the slot table of a variable-count op, G x S, one
/// slot per expert today (S = E/G, the expert side's first dimension). Its
/// values (a permutation of the experts) are data: the runtime checks them.
static LogicalResult verifyExpertSlots(Operation *op, Value slots, Value rows,
                                       int64_t numExperts, int64_t groupSize) {
  if (!slots)
    return success();
  if (!rows)
    return op->emitOpError() << "'expert_slots' needs variable-count routing "
                                "('rows'; moe-variable-dropless)";
  if (failed(verifyRank(op, "expert_slots", shapeOf(slots), 2)) ||
      failed(verifyDim(op, "expert_slots", shapeOf(slots), 0, groupSize,
                       "group size G")))
    return failure();
  return verifyDim(op, "expert_slots", shapeOf(slots), 1,
                   numExperts / groupSize,
                   "slots per rank S = E/G (one slot per expert)");
}

LogicalResult DispatchOp::verify() {
  ShapedType input = shapeOf(getInput()), result = shapeOf(getResult());
  if (failed(verifyRank(*this, "input", input, 3)) ||
      failed(verifyRank(*this, "result", result, 3)) ||
      failed(verifyRouting(*this, input, shapeOf(getIndices()),
                           shapeOf(getCounts()), getNumExperts(),
                           getCapacity())) ||
      failed(verifyCapacityMatchesSlots(*this, result, getCapacity(),
                                        getRows())) ||
      failed(verifySlotWindow(*this, getSlots(), getCapacity(),
                              shapeOf(getIndices()))))
    return failure();
  if (getBound().has_value() != isVariable())
    return emitOpError() << "variable-count dispatch needs both a 'bound' "
                            "and a 'rows' result";
  if (failed(verifyTokenPart(*this, getPart(), isVariable(), false)))
    return failure();
  if (getBound() && failed(verifyDim(*this, "result", result, 1, *getBound(),
                                     "bound R")))
    return failure();
  return verifyDim(*this, "result", result, 2, input.getDimSize(2),
                   "embedding M");
}

LogicalResult DispatchOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> groupSize = collectiveGroupSize(*this, table);
  if (failed(groupSize))
    return failure();
  if (failed(verifyRowsOverGroup(*this, getRows(), *groupSize)) ||
      failed(verifyExpertSlots(*this, getExpertSlots(), getRows(),
                               getNumExperts(), *groupSize)) ||
      failed(verifyAllCounts(*this, *groupSize)))
    return failure();
  return verifyExpertSideLayout(*this, "result", shapeOf(getResult()),
                                getNumExperts(), getCapacity(), *groupSize);
}

/// `to(%place)` and `residual(%h)`: whole samples placed by a dropless
/// token-choice combine (NetMoE); the residual has the expert side's shape.
static LogicalResult verifyPlacingCombine(CombineOp op) {
  if (!op.getPlacement()) {
    if (op.getResidual())
      return op.emitOpError() << "an inlined residual needs a placement "
                                 "('to')";
    return success();
  }
  if (op.getCapacity() || op.getSlots())
    return op.emitOpError() << "places samples only in dropless routing: with "
                               "a capacity a dropped token has no row to "
                               "carry its sample";
  if (shapeOf(op.getIndices()).getRank() != 3)
    return op.emitOpError() << "places samples only in token-choice routing";
  if (failed(verifyRank(op, "placement", shapeOf(op.getPlacement()), 1)))
    return failure();
  if (Value h = op.getResidual())
    if (h.getType() != op.getInput().getType())
      return op.emitOpError() << "'residual' must have the input's type "
                              << op.getInput().getType() << ", got "
                              << h.getType();
  return success();
}

LogicalResult CombineOp::verify() {
  ShapedType input = shapeOf(getInput()), result = shapeOf(getResult()),
             indices = shapeOf(getIndices());
  if (failed(verifyRank(*this, "input", input, 3)) ||
      failed(verifyRank(*this, "result", result, 3)) ||
      failed(verifyRouting(*this, result, indices, shapeOf(getCounts()),
                           getNumExperts(), getCapacity())) ||
      failed(verifyCapacityMatchesSlots(*this, input, getCapacity(),
                                        getRows())) ||
      failed(verifySlotWindow(*this, getSlots(), getCapacity(), indices)))
    return failure();
  if (getWeights().getType().getShape() != indices.getShape())
    return emitOpError() << "'weights' must have the shape of 'indices' ("
                         << formatShape(indices.getShape()) << "), got "
                         << formatShape(getWeights().getType().getShape());
  if (failed(verifyPlacingCombine(*this)) ||
      failed(verifyTokenPart(*this, getPart(), static_cast<bool>(getRows()),
                             static_cast<bool>(getPlacement()))))
    return failure();
  return verifyDim(*this, "result", result, 2, input.getDimSize(2),
                   "embedding M");
}

LogicalResult CombineOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> groupSize = collectiveGroupSize(*this, table);
  if (failed(groupSize))
    return failure();
  if (failed(verifyRowsOverGroup(*this, getRows(), *groupSize)) ||
      failed(verifyExpertSlots(*this, getExpertSlots(), getRows(),
                               getNumExperts(), *groupSize)))
    return failure();
  if (Value place = getPlacement()) {
    int64_t samples = shapeOf(getIndices()).getDimSize(0);
    if (!ShapedType::isDynamic(samples) &&
        failed(verifyDim(*this, "placement", shapeOf(place), 0,
                         samples * *groupSize,
                         "group size x samples per rank")))
      return failure();
  }
  return verifyExpertSideLayout(*this, "input", shapeOf(getInput()),
                                getNumExperts(), getCapacity(), *groupSize);
}

//===----------------------------------------------------------------------===//
// Experts
//===----------------------------------------------------------------------===//

/// `act(x·up) [⊙ x·gate] · down` weight shapes, with `lead` the leading
/// (local expert) dimensions of the weights: {E_l} for moe.expert, {} for
/// moe.shared_expert.
static LogicalResult verifyFfnWeights(Operation *op, ArrayRef<int64_t> lead,
                                      int64_t m, ShapedType up, Value gate,
                                      ShapedType down) {
  if (failed(verifyRank(op, "up", up, lead.size() + 2)))
    return failure();
  int64_t h = up.getDimSize(lead.size() + 1);
  SmallVector<int64_t> upShape(lead), downShape(lead);
  upShape.append({m, h});
  downShape.append({h, m});
  if (failed(verifyShape(op, "up", up, upShape)) ||
      failed(verifyShape(op, "down", down, downShape)))
    return failure();
  if (gate && failed(verifyShape(op, "gate", shapeOf(gate), upShape)))
    return failure();
  return success();
}

LogicalResult ExpertOp::verify() {
  ShapedType input = shapeOf(getInput());
  if (failed(verifyRank(*this, "input", input, 3)))
    return failure();
  if (failed(verifyFfnWeights(*this, {input.getDimSize(0)}, input.getDimSize(2),
                              shapeOf(getUp()), getGateProj(),
                              shapeOf(getDown()))))
    return failure();
  if (getResult().getType() != getInput().getType())
    return emitOpError() << "result type must equal the input type";
  if (Value rows = getRows())
    if (failed(verifyRank(*this, "rows", shapeOf(rows), 2)) ||
        failed(verifyDim(*this, "rows", shapeOf(rows), 0, input.getDimSize(0),
                         "local experts E_l")))
      return failure();
  return success();
}

LogicalResult SharedExpertOp::verify() {
  ShapedType input = shapeOf(getInput());
  if (input.getRank() < 1)
    return emitOpError() << "'input' must have rank >= 1";
  if (failed(verifyFfnWeights(*this, {}, input.getDimSize(input.getRank() - 1),
                              shapeOf(getUp()), getGateProj(),
                              shapeOf(getDown()))))
    return failure();
  if (getResult().getType() != getInput().getType())
    return emitOpError() << "result type must equal the input type";
  return success();
}

//===----------------------------------------------------------------------===//
// SigmoidGateOp
//===----------------------------------------------------------------------===//

LogicalResult SigmoidGateOp::verify() {
  ShapedType input = shapeOf(getInput());
  if (failed(verifyRank(*this, "input", input, 3)))
    return failure();
  int64_t m = input.getDimSize(2);
  if (failed(verifyShape(*this, "weight", shapeOf(getWeight()), {m, 1})))
    return failure();
  if (getValue().getType() != getInput().getType())
    return emitOpError() << "value type must equal the input type";
  if (getResult().getType() != getValue().getType())
    return emitOpError() << "result type must equal the value type";
  return success();
}

//===----------------------------------------------------------------------===//
// AllReduceOp
//===----------------------------------------------------------------------===//

LogicalResult AllReduceOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, ValueRange operands, DictionaryAttr,
    OpaqueProperties, RegionRange, SmallVectorImpl<Type> &inferredReturnTypes) {
  // A (chunked) all-reduce returns tensors of its operands' types.
  llvm::append_range(inferredReturnTypes, operands.getTypes());
  return success();
}

LogicalResult AllReduceOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "needs at least one tensor to reduce";
  if (getResultTypes() != getInputs().getTypes())
    return emitOpError() << "result types must equal the operand types";
  std::optional<ArrayRef<int64_t>> bytes = getBytes();
  if (!bytes)
    return success();
  if (getInputs().size() != 1)
    return emitOpError() << "a byte-range (chunk) all-reduce takes exactly "
                            "one tensor, got "
                         << getInputs().size();
  if (bytes->size() != 2)
    return emitOpError() << "bytes must be [offset, size]";
  auto type = cast<RankedTensorType>(getInputs().front().getType());
  if (!type.hasStaticShape())
    return emitOpError() << "a chunk needs a static-shaped tensor";
  int64_t elemBytes = (type.getElementTypeBitWidth() + 7) / 8;
  int64_t total = type.getNumElements() * elemBytes;
  int64_t offset = (*bytes)[0], size = (*bytes)[1];
  if (offset < 0 || size <= 0 || offset > total - size)
    return emitOpError() << "chunk [" << offset << ", " << offset + size
                         << ") is outside the tensor's " << total << " bytes";
  if (offset % elemBytes || size % elemBytes)
    return emitOpError() << "chunk [" << offset << ", " << offset + size
                         << ") must align to whole " << elemBytes
                         << "-byte elements";
  return success();
}

LogicalResult AllReduceOp::verifySymbolUses(SymbolTableCollection &table) {
  return success(succeeded(collectiveGroupSize(*this, table)));
}

//===----------------------------------------------------------------------===//
// VjpOp
//===----------------------------------------------------------------------===//

static bool isFloatTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa<FloatType>(tensor.getElementType());
}

Operation *VjpOp::getForwardOp() {
  Block &body = getBody().front();
  return body.empty() || &body.front() == body.getTerminator() ? nullptr
                                                               : &body.front();
}

CollectiveOpInterface VjpOp::getCollective() {
  return dyn_cast_or_null<CollectiveOpInterface>(getForwardOp());
}

/// Position of entry `index` among the float tensors of `types`, or -1.
static int64_t floatPosition(TypeRange types, unsigned index) {
  if (index >= types.size() || !isFloatTensor(types[index]))
    return -1;
  return llvm::count_if(types.take_front(index), isFloatTensor);
}

Value VjpOp::getCotangentOf(unsigned index) {
  Operation *forward = getForwardOp();
  int64_t k = forward ? floatPosition(forward->getResultTypes(), index) : -1;
  return k < 0 || k >= int64_t(getCotangents().size()) ? Value()
                                                       : getCotangents()[k];
}

Value VjpOp::getGradientOf(unsigned index) {
  Operation *forward = getForwardOp();
  int64_t k = forward ? floatPosition(forward->getOperandTypes(), index) : -1;
  return k < 0 || k >= int64_t(getGradients().size()) ? Value()
                                                      : getGradients()[k];
}

bool VjpOp::isCommunication() {
  Operation *forward = getForwardOp();
  return forward && isCommunicationTask(forward);
}

// moe.vjp (%a = %x : T, ...) cotangents(%dy : T, ...) -> (T, ...) attrs {body}
ParseResult VjpOp::parse(OpAsmParser &parser, OperationState &result) {
  SmallVector<OpAsmParser::Argument> args;
  SmallVector<OpAsmParser::UnresolvedOperand> primals, cotangents;
  SmallVector<Type> cotangentTypes;
  if (parseBoundArguments(parser, args, primals) ||
      parser.parseKeyword("cotangents") ||
      parser.parseCommaSeparatedList(
          OpAsmParser::Delimiter::Paren, [&]() -> ParseResult {
            OpAsmParser::UnresolvedOperand operand;
            Type type;
            if (parser.parseOperand(operand) || parser.parseColon() ||
                parser.parseType(type))
              return failure();
            cotangents.push_back(operand);
            cotangentTypes.push_back(type);
            return success();
          }))
    return failure();
  for (auto [arg, operand] : llvm::zip(args, primals))
    if (parser.resolveOperand(operand, arg.type, result.operands))
      return failure();
  if (parser.resolveOperands(cotangents, cotangentTypes,
                             parser.getCurrentLocation(), result.operands))
    return failure();
  result.getOrAddProperties<Properties>().operandSegmentSizes = {
      static_cast<int32_t>(primals.size()),
      static_cast<int32_t>(cotangents.size())};
  if (parser.parseOptionalArrowTypeList(result.types) ||
      parser.parseOptionalAttrDictWithKeyword(result.attributes))
    return failure();
  Region *body = result.addRegion();
  if (parser.parseRegion(*body, args))
    return failure();
  VjpOp::ensureTerminator(*body, parser.getBuilder(), result.location);
  return success();
}

void VjpOp::print(OpAsmPrinter &p) {
  p << " ";
  printBoundArguments(p, getBody().getArguments(), getPrimals());
  p << " cotangents(";
  llvm::interleaveComma(getCotangents(), p,
                        [&](Value v) { p << v << " : " << v.getType(); });
  p << ")";
  if (getNumResults()) {
    p << " -> (";
    llvm::interleaveComma(getResultTypes(), p);
    p << ")";
  }
  p.printOptionalAttrDictWithKeyword((*this)->getAttrs(),
                                     {"operandSegmentSizes"});
  p << " ";
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false,
                /*printBlockTerminators=*/true);
}

LogicalResult VjpOp::verify() {
  Block &body = getBody().front();
  if (failed(verifyBoundArguments(*this, "primal", body, getPrimals())))
    return failure();
  Operation *forward = getForwardOp();
  if (!forward ||
      std::next(forward->getIterator()) != body.getTerminator()->getIterator())
    return emitOpError() << "body must hold exactly one op and moe.yield";
  if (forward->getNumRegions() != 0)
    return emitOpError() << "cannot differentiate an op with regions";
  if (!llvm::equal(forward->getOperands(), body.getArguments()))
    return emitOpError() << "the body op must take the body arguments, in "
                            "order, as its operands";
  if (!llvm::equal(body.getTerminator()->getOperands(), forward->getResults()))
    return emitOpError() << "the body must yield the results of its op";

  SmallVector<Type> expectedCotangents, expectedGradients;
  for (Type t : forward->getResultTypes())
    if (isFloatTensor(t))
      expectedCotangents.push_back(t);
  for (Type t : forward->getOperandTypes())
    if (isFloatTensor(t))
      expectedGradients.push_back(t);
  if (TypeRange(getCotangents()) != TypeRange(expectedCotangents))
    return emitOpError() << "needs one cotangent per floating-point result of '"
                         << forward->getName() << "' ("
                         << expectedCotangents.size() << "), with its type";
  if (getResultTypes() != TypeRange(expectedGradients))
    return emitOpError() << "returns one gradient per floating-point operand "
                            "of '"
                         << forward->getName() << "' ("
                         << expectedGradients.size() << "), with its type";
  return success();
}

bool DispatchOp::isCommunication() { return true; }
bool CombineOp::isCommunication() { return true; }
bool AllReduceOp::isCommunication() { return true; }

//===----------------------------------------------------------------------===//
// Scheduling
//===----------------------------------------------------------------------===//

/// `whole` is `parts` equal pieces of `part` along dimension 0.
static LogicalResult verifyEqualSplit(Operation *op, ShapedType whole,
                                      TypeRange parts) {
  if (parts.empty())
    return op->emitOpError() << "needs at least one micro-batch";
  Type first = parts.front();
  if (!llvm::all_equal(parts))
    return op->emitOpError() << "micro-batches must all have one type";
  auto part = cast<ShapedType>(first);
  if (whole.getRank() < 1 || part.getRank() != whole.getRank() ||
      part.getElementType() != whole.getElementType())
    return op->emitOpError()
           << "micro-batch type " << first << " does not match " << whole;
  if (!whole.getShape().drop_front().equals(part.getShape().drop_front()))
    return op->emitOpError() << "micro-batches may only differ in dimension 0";
  int64_t r = parts.size();
  if (!whole.isDynamicDim(0) && !part.isDynamicDim(0) &&
      whole.getDimSize(0) != r * part.getDimSize(0))
    return op->emitOpError() << "dimension 0 of size " << whole.getDimSize(0)
                             << " does not split into " << r
                             << " micro-batches of " << part.getDimSize(0);
  return success();
}

LogicalResult SplitOp::verify() {
  return verifyEqualSplit(*this, shapeOf(getInput()), getResultTypes());
}

LogicalResult SplitOp::fold(FoldAdaptor,
                            SmallVectorImpl<OpFoldResult> &results) {
  auto merge = getInput().getDefiningOp<MergeOp>();
  if (!merge || merge.getInputs().getTypes() != getResultTypes())
    return failure();
  llvm::append_range(results, merge.getInputs());
  return success();
}

LogicalResult MergeOp::verify() {
  return verifyEqualSplit(*this, shapeOf(getResult()), getInputs().getTypes());
}

LogicalResult WaitEventOp::verify() {
  if (auto record = getEvent().getDefiningOp<RecordEventOp>())
    if (record.getStream() == getStream() &&
        getStream().getKind() != StreamKind::comm)
      return emitOpError() << "waits on an event recorded on the same stream "
                           << getStream()
                           << "; stream order already implies it";
  return success();
}

#define GET_OP_CLASSES
#include "moe/Dialect/Moe/MoeOps.cpp.inc"

//===----------------------------------------------------------------------===//
// RowsWindowOp
//===----------------------------------------------------------------------===//

LogicalResult RowsWindowOp::verify() {
  if (getInputs().empty() || getInputs().size() != getInputRows().size())
    return emitOpError() << "needs one 'rows' per input chunk, and at least "
                            "one chunk; got "
                         << getInputs().size() << " chunks and "
                         << getInputRows().size() << " rows";
  ArrayRef<int64_t> part = getPart();
  if (part.size() != 2 || part[1] < 1 || part[0] < 0 || part[0] >= part[1])
    return emitOpError() << "'part' must be [i, r] with 0 <= i < r";
  auto result = cast<ShapedType>(getResult().getType());
  auto rows = cast<ShapedType>(getRows().getType());
  for (Value input : getInputs())
    if (input.getType() != result)
      return emitOpError() << "every input chunk must have the result's type "
                           << result << ", got " << input.getType();
  for (Value r : getInputRows())
    if (r.getType() != rows)
      return emitOpError() << "every input's rows must have the 'rows' "
                              "result's type "
                           << rows << ", got " << r.getType();
  if (result.getRank() != 3 || rows.getRank() != 2 ||
      result.getDimSize(0) != rows.getDimSize(0))
    return emitOpError() << "result must be E_l x R x M and rows E_l x G";
  return success();
}

//===----------------------------------------------------------------------===//
// SlotWindowOp
//===----------------------------------------------------------------------===//

LogicalResult SlotWindowOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "needs at least one input window";
  auto result = cast<ShapedType>(getResult().getType());
  const int64_t groups = getGroups(), from = getFrom();
  int64_t end = from;
  if (result.getRank() != 3 || !result.hasStaticShape())
    return emitOpError() << "result must be a static E_l x (G slots) x M";
  for (Value input : getInputs()) {
    auto type = cast<ShapedType>(input.getType());
    if (type.getRank() != 3 || !type.hasStaticShape() ||
        type.getDimSize(0) != result.getDimSize(0) ||
        type.getDimSize(2) != result.getDimSize(2) ||
        type.getElementType() != result.getElementType())
      return emitOpError() << "inputs must be static E_l x (G slots) x M "
                              "tensors like the result, got "
                           << input.getType();
    if (type.getDimSize(1) % groups != 0)
      return emitOpError() << "input dimension 1 (" << type.getDimSize(1)
                           << ") is not a multiple of groups = " << groups;
    end += type.getDimSize(1) / groups;
  }
  ArrayRef<int64_t> window = getWindow();
  if (window.size() != 2 || window[1] <= 0)
    return emitOpError() << "window must be [first, count] with count > 0";
  if (window[0] < from || window[0] + window[1] > end)
    return emitOpError() << "window [" << window[0] << ", " << window[1]
                         << "] is not inside the inputs' slots [" << from
                         << ", " << end << ")";
  if (result.getDimSize(1) != groups * window[1])
    return emitOpError() << "result dimension 1 must be groups x count = "
                         << groups * window[1] << ", got "
                         << result.getDimSize(1);
  return success();
}
