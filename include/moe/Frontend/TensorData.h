//===- TensorData.h - where an ONNX tensor's bytes are ----------*- C++ -*-===//
//
// Shared by the importer (OnnxGraph: is the data present, small constants'
// values) and the weight loader (WeightLoader: a parameter's values), so that
// both read a model's tensors by the same rules: element counts that cannot
// overflow, and external data only inside the model's directory, only from a
// regular file, only within its length.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_FRONTEND_TENSORDATA_H
#define MOE_FRONTEND_TENSORDATA_H

#include "llvm/ADT/StringRef.h"

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <string>

namespace mlir::moe::frontend {

/// Bytes per element of the ONNX data types whose values we read; 0 for
/// the others.
size_t elementSize(int32_t dataType);

/// Element count of a tensor; nullopt on a negative dim or overflow (a
/// fuzzed or corrupt file must not make us allocate its claimed size).
std::optional<uint64_t> elementCount(const onnx::TensorProto &t);

/// Where an EXTERNAL tensor's bytes lie.
struct ExternalRange {
  std::string file;
  uint64_t offset = 0, length = 0;
};

/// The file an EXTERNAL tensor's data lives in, inside `modelDir`; nullopt
/// for inline data and for a location that is empty, absolute or has a
/// ".." component (ONNX requires a relative path inside the model's
/// directory, and a model must not make us read /etc/... or ../..).
std::optional<std::string> externalFile(const onnx::TensorProto &t,
                                        llvm::StringRef modelDir);

/// File, offset and length (the `length` entry, else dims x element size)
/// of an EXTERNAL tensor; nullopt when externalFile() refuses the location
/// or an offset / length entry is not a number.
std::optional<ExternalRange> externalRange(const onnx::TensorProto &t,
                                           llvm::StringRef modelDir);

/// Size of the range's file when it is a regular file (a FIFO or device a
/// model names could block); nullopt when absent or not a regular file.
std::optional<uint64_t> regularFileSize(const ExternalRange &r);

/// The range's bytes; nullopt when its file is absent, not regular, too
/// short, or unreadable.
std::optional<std::string> readExternal(const ExternalRange &r);

} // namespace mlir::moe::frontend

#endif // MOE_FRONTEND_TENSORDATA_H
