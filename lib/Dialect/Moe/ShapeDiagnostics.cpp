//===- ShapeDiagnostics.cpp - shape checks with readable errors -----------===//

#include "ShapeDiagnostics.h"

#include "moe/Dialect/Moe/MoeOps.h"

#include "mlir/IR/Diagnostics.h"
#include <charconv>
#include <cmath>

namespace mlir::moe::detail {

std::string formatShape(ArrayRef<int64_t> shape) {
  if (shape.empty())
    return "scalar";
  std::string out;
  for (auto [i, dim] : llvm::enumerate(shape)) {
    if (i)
      out += "x";
    out += ShapedType::isDynamic(dim) ? std::string("?") : std::to_string(dim);
  }
  return out;
}

LogicalResult verifyRank(Operation *op, StringRef name, ShapedType type,
                         int64_t rank) {
  if (type.getRank() == rank)
    return success();
  return op->emitOpError() << "'" << name << "' must have rank " << rank
                           << ", got " << formatShape(type.getShape());
}

LogicalResult verifyDim(Operation *op, StringRef name, ShapedType type,
                        unsigned dim, int64_t expected, StringRef meaning) {
  int64_t actual = type.getDimSize(dim);
  if (sameOrDynamic(actual, expected))
    return success();
  return op->emitOpError() << "'" << name << "' dimension " << dim << " ("
                           << meaning << ") must be " << expected << ", got "
                           << actual << " in shape "
                           << formatShape(type.getShape());
}

LogicalResult verifyShape(Operation *op, StringRef name, ShapedType type,
                          ArrayRef<int64_t> expected) {
  if (type.getRank() != static_cast<int64_t>(expected.size()) ||
      !llvm::all_of(llvm::zip(type.getShape(), expected), [](auto pair) {
        return sameOrDynamic(std::get<0>(pair), std::get<1>(pair));
      }))
    return op->emitOpError()
           << "'" << name << "' must have shape " << formatShape(expected)
           << ", got " << formatShape(type.getShape());
  return success();
}

} // namespace mlir::moe::detail

int64_t mlir::moe::expertCapacity(double capacityFactor, int64_t topK,
                                  int64_t tokens, int64_t experts) {
  // Compute in long double and nudge down by a relative epsilon so that
  // f = 1.1 (not exactly representable) with an integral product does not
  // round up to one slot too many.
  long double exact = static_cast<long double>(capacityFactor) * topK * tokens /
                      static_cast<long double>(experts);
  long double nudged = exact * (1.0L - 1e-12L);
  return static_cast<int64_t>(std::ceil(nudged));
}

namespace mlir::moe::detail {

std::string formatDouble(double value) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), value);
  std::string out(buf, res.ptr);
  if (out.find_first_of(".eEn") == std::string::npos) // 'n' for nan/inf
    out += ".0";
  return out;
}

} // namespace mlir::moe::detail
