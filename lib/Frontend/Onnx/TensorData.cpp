//===- TensorData.cpp - where an ONNX tensor's bytes are ------------------===//

#include "moe/Frontend/TensorData.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <fstream>
#include <limits>

using namespace mlir::moe::frontend;

size_t mlir::moe::frontend::elementSize(int32_t dataType) {
  switch (dataType) {
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::UINT32:
    return 4;
  case onnx::TensorProto::DOUBLE:
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64:
    return 8;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
    return 2;
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::BOOL:
    return 1;
  default:
    return 0;
  }
}

std::optional<uint64_t>
mlir::moe::frontend::elementCount(const onnx::TensorProto &t) {
  uint64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0)
      return std::nullopt;
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / uint64_t(d))
      return std::nullopt;
    n *= uint64_t(d);
  }
  return n;
}

namespace {
const std::string *externalEntry(const onnx::TensorProto &t,
                                 llvm::StringRef key) {
  for (const auto &e : t.external_data())
    if (e.key() == key)
      return &e.value();
  return nullptr;
}
} // namespace

std::optional<std::string>
mlir::moe::frontend::externalFile(const onnx::TensorProto &t,
                                  llvm::StringRef modelDir) {
  if (t.data_location() != onnx::TensorProto::EXTERNAL)
    return std::nullopt;
  const std::string *loc = externalEntry(t, "location");
  if (!loc || loc->empty() || llvm::sys::path::is_absolute(*loc))
    return std::nullopt;
  for (auto it = llvm::sys::path::begin(*loc), e = llvm::sys::path::end(*loc);
       it != e; ++it)
    if (*it == "..")
      return std::nullopt;
  llvm::SmallString<256> file(modelDir);
  llvm::sys::path::append(file, *loc);
  return std::string(file.str());
}

std::optional<ExternalRange>
mlir::moe::frontend::externalRange(const onnx::TensorProto &t,
                                   llvm::StringRef modelDir) {
  auto file = externalFile(t, modelDir);
  if (!file)
    return std::nullopt;
  ExternalRange r;
  r.file = *file;
  if (const std::string *offset = externalEntry(t, "offset"))
    if (llvm::StringRef(*offset).getAsInteger(10, r.offset))
      return std::nullopt;
  if (const std::string *length = externalEntry(t, "length")) {
    if (llvm::StringRef(*length).getAsInteger(10, r.length))
      return std::nullopt;
  } else {
    auto n = elementCount(t);
    size_t es = elementSize(t.data_type());
    if (!n || !es || *n > std::numeric_limits<uint64_t>::max() / es)
      return std::nullopt;
    r.length = *n * es;
  }
  return r;
}

std::optional<uint64_t>
mlir::moe::frontend::regularFileSize(const ExternalRange &r) {
  llvm::sys::fs::file_status st;
  if (llvm::sys::fs::status(r.file, st) ||
      st.type() != llvm::sys::fs::file_type::regular_file)
    return std::nullopt;
  return st.getSize();
}

std::optional<std::string>
mlir::moe::frontend::readExternal(const ExternalRange &r) {
  auto size = regularFileSize(r);
  if (!size || r.offset > *size || r.length > *size - r.offset)
    return std::nullopt;
  std::ifstream in(r.file, std::ios::binary);
  if (!in)
    return std::nullopt;
  in.seekg(std::streamoff(r.offset));
  std::string bytes(r.length, '\0');
  if (!in.read(bytes.data(), std::streamsize(r.length)))
    return std::nullopt;
  return bytes;
}
