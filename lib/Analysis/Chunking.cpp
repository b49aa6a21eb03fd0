//===- Chunking.cpp - slice gradient all-reduces into S_p chunks ----------===//

#include "moe/Analysis/Chunking.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"

#include <cctype>

#include <limits>

using namespace mlir;
using namespace mlir::moe;

SmallVector<GradientChunk> mlir::moe::planChunks(ArrayRef<int64_t> bytes,
                                                 int64_t chunkBytes) {
  SmallVector<GradientChunk> chunks;
  GradientChunk packed;
  int64_t packedBytes = 0;
  auto flush = [&] {
    if (!packed.tensors.empty())
      chunks.push_back(packed);
    packed = GradientChunk();
    packedBytes = 0;
  };
  for (auto [i, size] : llvm::enumerate(bytes)) {
    if (size >= chunkBytes) {
      flush();
      for (int64_t offset = 0; offset < size; offset += chunkBytes) {
        GradientChunk range;
        range.tensors.push_back(i);
        range.offset = offset;
        range.size = std::min(chunkBytes, size - offset);
        chunks.push_back(range);
      }
      continue;
    }
    if (packedBytes + size > chunkBytes)
      flush();
    packed.tensors.push_back(i);
    packedBytes += size;
  }
  flush();
  return chunks;
}

SmallVector<TensorPiece> mlir::moe::sliceStream(ArrayRef<int64_t> bytes,
                                                ArrayRef<int64_t> elementBytes,
                                                ArrayRef<int64_t> cuts) {
  SmallVector<TensorPiece> pieces;
  unsigned slice = 0;
  int64_t start = 0; // the tensor's first byte in the stream
  for (auto [t, size] : llvm::enumerate(bytes)) {
    int64_t end = start + size, from = start;
    while (from < end) {
      int64_t cut = slice < cuts.size() ? cuts[slice] : end;
      if (cut >= end) {
        pieces.push_back({unsigned(t), slice, from - start, end - from});
        break;
      }
      // Inside the tensor: down to a whole element.
      int64_t element = std::max<int64_t>(elementBytes[t], 1);
      int64_t to = cut > start ? start + (cut - start) / element * element
                               : start;
      if (to > from) {
        pieces.push_back({unsigned(t), slice, from - start, to - from});
        from = to;
      }
      ++slice;
    }
    start = end;
  }
  return pieces;
}

std::optional<int64_t> mlir::moe::parseByteSize(StringRef text) {
  text = text.trim();
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(text[digits]))
    ++digits;
  if (digits == 0)
    return std::nullopt;
  uint64_t value;
  if (text.take_front(digits).getAsInteger(10, value))
    return std::nullopt;
  std::optional<uint64_t> unit = llvm::StringSwitch<std::optional<uint64_t>>(
                                     text.drop_front(digits).trim())
                                     .Cases({"", "B"}, 1)
                                     .Case("KB", 1000)
                                     .Case("MB", 1000 * 1000)
                                     .Case("GB", 1000 * 1000 * 1000)
                                     .Case("KiB", 1024)
                                     .Case("MiB", 1024 * 1024)
                                     .Case("GiB", 1024 * 1024 * 1024)
                                     .Default(std::nullopt);
  if (!unit || value == 0 ||
      value >
          static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / *unit)
    return std::nullopt;
  return static_cast<int64_t>(value * *unit);
}
