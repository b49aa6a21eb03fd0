//===- MoeAttrs.cpp - moe dialect attributes ------------------------------===//

#include "moe/Dialect/Moe/MoeAttrs.h"
#include "moe/Dialect/Moe/MoeDialect.h"
#include "moe/Dialect/Moe/MoeOps.h"

#include "ShapeDiagnostics.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::moe;

#include "moe/Dialect/Moe/MoeEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "moe/Dialect/Moe/MoeAttrs.cpp.inc"

void MoeDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "moe/Dialect/Moe/MoeAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// StreamAttr
//===----------------------------------------------------------------------===//

LogicalResult StreamAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 StreamKind kind, int64_t index) {
  if (index < 0)
    return emitError() << "stream index must be non-negative, got " << index;
  return success();
}

//===----------------------------------------------------------------------===//
// ModelAttr
//===----------------------------------------------------------------------===//

int64_t ModelAttr::getCapacity() const {
  if (isDropless())
    return ShapedType::kDynamic;
  return expertCapacity(getF(), getTopK(), getBatch() * getSeq(), getExperts());
}

static LogicalResult verifyAxes(function_ref<InFlightDiagnostic()> emitError,
                                StringRef name, ArrayRef<int16_t> axes) {
  llvm::SmallSet<int16_t, 4> seen;
  for (int16_t axis : axes) {
    if (axis < 0)
      return emitError() << name << " has negative grid axis " << axis;
    if (!seen.insert(axis).second)
      return emitError() << name << " repeats grid axis " << axis;
  }
  return success();
}

LogicalResult
ModelAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t layers,
                  int64_t batch, int64_t seq, int64_t embed, int64_t hidden,
                  int64_t experts, int64_t topK, APFloat capacityFactorAttr,
                  FlatSymbolRefAttr grid, ArrayRef<int16_t> epAxes,
                  ArrayRef<int16_t> dpAxes, ArrayRef<int16_t> intraAxes) {
  double capacityFactor = capacityFactorAttr.convertToDouble();
  std::pair<StringRef, int64_t> positives[] = {
      {"layers", layers}, {"batch", batch},   {"seq", seq},
      {"embed", embed},   {"hidden", hidden}, {"experts", experts},
      {"top_k", topK}};
  for (auto [name, value] : positives)
    if (value <= 0)
      return emitError() << "model field '" << name
                         << "' must be positive, got " << value;
  if (topK > experts)
    return emitError() << "top_k (" << topK
                       << ") exceeds the number of experts (" << experts << ")";
  if (!(capacityFactor >= 0.0) || std::isinf(capacityFactor))
    return emitError() << "capacity_factor must be a positive number, got "
                       << detail::formatDouble(capacityFactor);
  if (!grid)
    return emitError() << "model needs a device grid";
  if (failed(verifyAxes(emitError, "ep_axes", epAxes)) ||
      failed(verifyAxes(emitError, "dp_axes", dpAxes)) ||
      failed(verifyAxes(emitError, "intra_axes", intraAxes)))
    return failure();
  return success();
}

// Fixed-order keyword syntax; see MoeAttrs.td for an example.
Attribute ModelAttr::parse(AsmParser &parser, Type) {
  int64_t ints[7];
  const char *names[7] = {"layers", "batch",   "seq",  "embed",
                          "hidden", "experts", "top_k"};
  if (parser.parseLess())
    return {};
  for (int i = 0; i < 7; ++i) {
    if (i && parser.parseComma())
      return {};
    if (parser.parseKeyword(names[i]) || parser.parseEqual() ||
        parser.parseInteger(ints[i]))
      return {};
  }
  double capacityFactor = 0.0;
  if (parser.parseComma())
    return {};
  if (failed(parser.parseOptionalKeyword("dropless"))) {
    if (parser.parseKeyword("capacity_factor") || parser.parseEqual() ||
        parser.parseFloat(capacityFactor))
      return {};
    if (capacityFactor <= 0.0) {
      parser.emitError(parser.getCurrentLocation(),
                       "capacity_factor must be positive; write `dropless` "
                       "for no capacity limit");
      return {};
    }
  }
  FlatSymbolRefAttr grid;
  if (parser.parseComma() || parser.parseKeyword("grid") ||
      parser.parseEqual() || parser.parseAttribute(grid))
    return {};
  SmallVector<int16_t> axes[3];
  const char *axisNames[3] = {"ep_axes", "dp_axes", "intra_axes"};
  for (int i = 0; i < 3; ++i) {
    if (parser.parseComma() || parser.parseKeyword(axisNames[i]) ||
        parser.parseEqual() ||
        parser.parseCommaSeparatedList(AsmParser::Delimiter::Square,
                                       [&]() -> ParseResult {
                                         int16_t axis;
                                         if (parser.parseInteger(axis))
                                           return failure();
                                         axes[i].push_back(axis);
                                         return success();
                                       }))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<ModelAttr>(
      parser.getContext(), ints[0], ints[1], ints[2], ints[3], ints[4], ints[5],
      ints[6], APFloat(capacityFactor), grid, axes[0], axes[1], axes[2]);
}

void ModelAttr::print(AsmPrinter &printer) const {
  printer << "<layers = " << getLayers() << ", batch = " << getBatch()
          << ", seq = " << getSeq() << ", embed = " << getEmbed()
          << ", hidden = " << getHidden() << ", experts = " << getExperts()
          << ", top_k = " << getTopK() << ", ";
  if (isDropless())
    printer << "dropless";
  else
    printer << "capacity_factor = " << detail::formatDouble(getF());
  printer << ", grid = " << getGrid();
  auto printAxes = [&](StringRef name, ArrayRef<int16_t> axes) {
    printer << ", " << name << " = [";
    llvm::interleaveComma(axes, printer);
    printer << "]";
  };
  printAxes("ep_axes", getEpAxes());
  printAxes("dp_axes", getDpAxes());
  printAxes("intra_axes", getIntraAxes());
  printer << ">";
}

//===----------------------------------------------------------------------===//
// TaskAttr
//===----------------------------------------------------------------------===//

std::string TaskAttr::getLabel() const {
  std::string label = stringifyTaskKind(getKind()).str();
  if (getKind() == TaskKind::AT || getKind() == TaskKind::D ||
      getKind() == TaskKind::E || getKind() == TaskKind::C)
    label += "_" + std::to_string(getMicro() + 1);
  if (getBlock() >= 0)
    label += "^" + std::to_string(getBlock() + 1);
  if (getChunk() >= 0)
    label += "." + std::to_string(getChunk());
  if (getPhase() == Phase::bwd && getKind() != TaskKind::AR &&
      getKind() != TaskKind::OPT)
    label += "'";
  return label;
}

Attribute TaskAttr::parse(AsmParser &parser, Type) {
  StringRef kindName, phaseName;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() || parser.parseKeyword(&kindName) ||
      parser.parseComma() || parser.parseKeyword(&phaseName))
    return {};
  std::optional<TaskKind> kind = symbolizeTaskKind(kindName);
  std::optional<Phase> phase = symbolizePhase(phaseName);
  if (!kind || !phase) {
    parser.emitError(loc, "expected a task kind (PRE, AT, D, E, C, HEAD, AR, "
                          "OPT) and a phase (fwd, bwd)");
    return {};
  }
  int64_t fields[3] = {-1, 0, -1}; // block, micro, chunk
  const char *names[3] = {"block", "micro", "chunk"};
  while (succeeded(parser.parseOptionalComma())) {
    StringRef name;
    SMLoc at = parser.getCurrentLocation();
    if (parser.parseKeyword(&name))
      return {};
    auto *it = llvm::find(names, name);
    if (it == std::end(names)) {
      parser.emitError(at, "expected block, micro or chunk");
      return {};
    }
    if (parser.parseEqual() || parser.parseInteger(fields[it - names]))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return TaskAttr::get(parser.getContext(), *kind, *phase, fields[0], fields[1],
                       fields[2]);
}

void TaskAttr::print(AsmPrinter &printer) const {
  printer << "<" << stringifyTaskKind(getKind()) << ", "
          << stringifyPhase(getPhase());
  if (getBlock() != -1)
    printer << ", block = " << getBlock();
  if (getMicro() != 0)
    printer << ", micro = " << getMicro();
  if (getChunk() != -1)
    printer << ", chunk = " << getChunk();
  printer << ">";
}

//===----------------------------------------------------------------------===//
// SourceAttr
//===----------------------------------------------------------------------===//

LogicalResult SourceAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 StringAttr file, ArrayRef<StringAttr> names,
                                 FloatAttr scale, ArrayRef<int64_t> slice,
                                 bool stacked, bool transpose) {
  if (!file || file.getValue().empty())
    return emitError() << "#moe.source needs `file`, a non-empty string";
  if (names.empty() || llvm::any_of(names, [](StringAttr n) {
        return !n || n.getValue().empty();
      }))
    return emitError() << "#moe.source needs `names`, a non-empty list of "
                          "initializer names";
  if (names.size() > 1 && !stacked)
    return emitError() << "#moe.source lists " << names.size()
                       << " initializers but is not `stacked`";
  if (!slice.empty() && ((slice.size() != 3 && slice.size() != 4) ||
                         slice[0] < 0 || slice[1] < 0 || slice[2] <= 0))
    return emitError() << "#moe.source `slice` must be [axis, begin, size] "
                          "or [axis, begin, size, stride] with size > 0";
  if (slice.size() == 4 && (slice[3] <= 0 || !stacked))
    return emitError() << "#moe.source `slice` has a stride (initializer n "
                          "of a stack starts at begin + n * stride) but "
                       << (stacked ? "it is not positive" : "is not `stacked`");
  return success();
}

Attribute SourceAttr::parse(AsmParser &parser, Type) {
  MLIRContext *c = parser.getContext();
  SMLoc loc = parser.getCurrentLocation();
  std::string file;
  SmallVector<StringAttr> names;
  if (parser.parseLess() || parser.parseKeyword("file") ||
      parser.parseEqual() || parser.parseString(&file) ||
      parser.parseComma() || parser.parseKeyword("names") ||
      parser.parseEqual() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
        std::string name;
        if (parser.parseString(&name))
          return failure();
        names.push_back(StringAttr::get(c, name));
        return success();
      }))
    return {};
  FloatAttr scale;
  SmallVector<int64_t> slice;
  bool stacked = false, transpose = false;
  llvm::StringSet<> seen;
  while (succeeded(parser.parseOptionalComma())) {
    StringRef key;
    SMLoc at = parser.getCurrentLocation();
    if (parser.parseKeyword(&key))
      return {};
    if (!seen.insert(key).second) {
      parser.emitError(at, "#moe.source repeats `") << key << "`";
      return {};
    }
    if (key == "stacked") {
      stacked = true;
    } else if (key == "transpose") {
      transpose = true;
    } else if (key == "scale") {
      double value;
      if (parser.parseEqual() || parser.parseFloat(value))
        return {};
      scale = FloatAttr::get(Float64Type::get(c), value);
    } else if (key == "slice") {
      if (parser.parseEqual() ||
          parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
            return parser.parseInteger(slice.emplace_back());
          }))
        return {};
    } else {
      parser.emitError(at, "#moe.source has an unknown key '")
          << key << "' (expected scale, slice, stacked or transpose)";
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  return SourceAttr::getChecked([&] { return parser.emitError(loc); }, c,
                                StringAttr::get(c, file), names, scale, slice,
                                stacked, transpose);
}

void SourceAttr::print(AsmPrinter &printer) const {
  printer << "<file = ";
  printer.printString(getFile().getValue());
  printer << ", names = [";
  llvm::interleaveComma(getNames(), printer, [&](StringAttr name) {
    printer.printString(name.getValue());
  });
  printer << "]";
  if (getScale()) {
    printer << ", scale = ";
    printer.printAttributeWithoutType(getScale());
  }
  if (!getSlice().empty()) {
    printer << ", slice = [";
    llvm::interleaveComma(getSlice(), printer);
    printer << "]";
  }
  if (getStacked())
    printer << ", stacked";
  if (getTranspose())
    printer << ", transpose";
  printer << ">";
}
