//===- Chunking.h - slice gradient all-reduces into S_p chunks --*- C++ -*-===//
#ifndef MOE_ANALYSIS_CHUNKING_H
#define MOE_ANALYSIS_CHUNKING_H

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <optional>

namespace mlir::moe {

/// One chunk of a block's all-reduce: either whole tensors (`tensors`, at
/// least one, byte range unset) or a byte range of one tensor.
struct GradientChunk {
  SmallVector<unsigned> tensors;
  int64_t offset = -1, size = -1; // bytes, when a range of tensors[0]
  bool isRange() const { return offset >= 0; }
};

/// FlowMoE §3.3 chunking with S_p = `chunkBytes`: a tensor of at least S_p
/// bytes becomes ceil(bytes / S_p) ranges (the last one shorter); smaller
/// tensors are packed whole, in order, into chunks of at most S_p bytes.
/// `chunkBytes` must be a positive multiple of `elementBytes`.
SmallVector<GradientChunk> planChunks(ArrayRef<int64_t> tensorBytes,
                                      int64_t chunkBytes);

/// A piece of one tensor in FSMoE's gradient slicing: bytes [offset,
/// offset + size) of tensor `tensor`, reduced in slice `slice`.
struct TensorPiece {
  unsigned tensor = 0, slice = 0;
  int64_t offset = 0, size = 0;
};

/// FSMoE §5 slicing: the tensors (`bytes` each, in the order their
/// gradients become ready) laid end to end, slice i covering the bytes
/// [cuts[i-1], cuts[i]) and the last slice (index cuts.size()) the rest. A
/// cut inside a tensor moves down to a multiple of its element size
/// (`elementBytes`), so a byte is never reduced earlier than planned.
/// `cuts` must be ascending. Returns the pieces in stream order.
SmallVector<TensorPiece> sliceStream(ArrayRef<int64_t> bytes,
                                     ArrayRef<int64_t> elementBytes,
                                     ArrayRef<int64_t> cuts);

/// Parses a byte size: "1048576", "512KiB", "2MiB", "1GiB", "4MB", "64KB".
/// KB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024. std::nullopt if
/// malformed, zero, negative or overflowing.
std::optional<int64_t> parseByteSize(StringRef text);

} // namespace mlir::moe

#endif // MOE_ANALYSIS_CHUNKING_H
