//===- WeightLoader.h - a parameter's values from its moe.source -*- C++ -*-===//
//
// The importer never copies weights into the IR: each parameter argument
// carries a `moe.source = #moe.source<file, names, scale, slice, stacked,
// transpose>` (SourceAttr; docs/frontend/builder.md). This reads those values back from the ONNX
// file (inline or external data; float32, float16, bfloat16 and float64
// initializers, converted to float32) and applies the recorded slice,
// transpose, stacking and scale, so that a runtime can start from the
// model's real weights. Parsed files are cached per loader.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TOOLS_WEIGHTLOADER_H
#define MOE_TOOLS_WEIGHTLOADER_H

#include "moe/Dialect/Moe/MoeAttrs.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace onnx {
class ModelProto;
class TensorProto;
} // namespace onnx

namespace mlir::moe::frontend {

/// An initializer's values as float32 with its dimensions.
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

/// Reads one TensorProto's data (raw_data, typed fields or external data
/// relative to `modelDir`).
llvm::Expected<HostTensor> readTensor(const onnx::TensorProto &tensor,
                                      llvm::StringRef modelDir);

class WeightLoader {
public:
  WeightLoader();
  ~WeightLoader();

  /// The values `source` describes, shaped `shape` (row-major). For a
  /// stacked source (one initializer per expert), `firstExpert` and
  /// shape[0] pick the experts this rank holds. Errors name the file and
  /// initializer and say what does not match.
  llvm::Expected<std::vector<float>> load(SourceAttr source,
                                          llvm::ArrayRef<int64_t> shape,
                                          int64_t firstExpert = 0);

  /// A directory to try when a relative `file` is not found from the
  /// working directory: the importer writes the path as it was given, so
  /// a step run from elsewhere finds the model next to its IR file.
  void setFallbackDirectory(llvm::StringRef dir) { fallbackDir = dir.str(); }

private:
  llvm::Expected<const onnx::ModelProto *> model(const std::string &path);
  std::map<std::string, std::unique_ptr<onnx::ModelProto>> models;
  std::string fallbackDir;
};

} // namespace mlir::moe::frontend

#endif // MOE_TOOLS_WEIGHTLOADER_H
