//===- InitializerWriter.h - trained values back into ONNX initializers -*- C++ -*-===//
//
// The inverse of WeightLoader (tools/param-loading/WeightLoader.h): where
// the loader reads a parameter's values from the initializers its
// `moe.source` names (slice, transpose, stack, scale, in that order), this
// writer puts a whole parameter's values (every expert) back into them,
// undoing the steps in reverse order: divide by the scale, split the
// stack into one initializer per expert, transpose back, write into the
// slice. Initializers keep their names, shapes and data types; everything
// else in the model is left as it was. docs/tools/moe-export-onnx.md.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TOOLS_INITIALIZERWRITER_H
#define MOE_TOOLS_INITIALIZERWRITER_H

#include "moe/Dialect/Moe/MoeAttrs.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace onnx {
class ModelProto;
} // namespace onnx

namespace mlir::moe::frontend {

class InitializerWriter {
public:
  ~InitializerWriter();

  /// Reads the ONNX model at `path` (the one the step was imported from).
  static llvm::Expected<std::unique_ptr<InitializerWriter>>
  open(const std::string &path);

  /// Writes parameter `param`'s values (`shape`, row-major; expert
  /// parameters with all experts) into the initializers `source` names.
  /// Errors name the file, the initializer and the parameter: a missing
  /// initializer, a shape that does not match after undoing the import's
  /// layout change, or an element another parameter already wrote with a
  /// different value (tied weights trained apart).
  llvm::Error store(llvm::StringRef param, SourceAttr source,
                    llvm::ArrayRef<int64_t> shape,
                    llvm::ArrayRef<float> values);

  /// The model with the stored values as its initializers' data (inline,
  /// in each initializer's own data type; external data is inlined so the
  /// file stands alone), serialized. Fails over protobuf's 2 GiB.
  llvm::Expected<std::string> serialize();

  /// How many initializers were written.
  size_t written() const { return edits.size(); }

private:
  explicit InitializerWriter(std::string path);

  /// One initializer being rewritten: its values as float, and which
  /// parameter wrote each element (-1: none).
  struct Edit {
    std::vector<int64_t> shape;
    std::vector<float> values;
    std::vector<int32_t> writer;
  };
  llvm::Expected<Edit *> edit(llvm::StringRef name, llvm::StringRef param);

  std::string path;
  std::unique_ptr<onnx::ModelProto> model;
  std::map<std::string, Edit> edits;
  std::vector<std::string> params; // writer index -> parameter name
};

} // namespace mlir::moe::frontend

#endif // MOE_TOOLS_INITIALIZERWRITER_H
