//===- ChunkGradients.cpp - AR^(l) as S_p-byte chunk tasks ----------------===//
//
// FlowMoE §3.3 / Alg. 1: each block's all-reduce tensor is sliced into
// chunks of S_p bytes; each chunk is a low-priority communication task that
// the communication pool issues only when no all-to-all is ready (Alg. 2).
// Theorem 2: with no start-up cost S_p -> 0 is optimal; with one, S_p trades
// overlap against per-chunk latency (tuned by BO, §4.1).
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/Chunking.h"
#include "moe/Analysis/ModelStats.h"
#include "moe/Analysis/Tasks.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOECHUNKGRADIENTS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

static LogicalResult chunkOne(AllReduceOp allReduce, int64_t chunkBytes) {
  SmallVector<int64_t> bytes;
  for (Value input : allReduce.getInputs()) {
    int64_t size = tensorBytes(input.getType());
    if (size < 0)
      return allReduce.emitOpError()
             << "cannot be chunked: gradient " << input.getType()
             << " has no static size";
    int64_t element =
        (cast<ShapedType>(input.getType()).getElementTypeBitWidth() + 7) / 8;
    if (chunkBytes % element)
      return allReduce.emitOpError() << "cannot be chunked into " << chunkBytes
                                     << "-byte chunks: not a multiple of the "
                                     << element << "-byte element size";
    bytes.push_back(size);
  }
  replaceByChunks(allReduce, planChunks(bytes, chunkBytes));
  return success();
}

void mlir::moe::replaceByChunks(
    AllReduceOp allReduce, ArrayRef<GradientChunk> chunks,
    function_ref<void(unsigned, AllReduceOp)> annotate) {
  TaskAttr task = getTask(allReduce);
  OpBuilder builder(allReduce);
  SmallVector<Value> current(allReduce.getInputs());
  for (auto [index, chunk] : llvm::enumerate(chunks)) {
    SmallVector<Value> inputs;
    for (unsigned t : chunk.tensors)
      inputs.push_back(current[t]);
    auto piece = AllReduceOp::create(
        builder, allReduce.getLoc(), inputs, allReduce.getGridAttr(),
        allReduce.getAxesAttr(),
        chunk.isRange()
            ? builder.getDenseI64ArrayAttr({chunk.offset, chunk.size})
            : DenseI64ArrayAttr());
    // Keep the stream (and anything else the scheduler set).
    piece->setDiscardableAttrs(allReduce->getDiscardableAttrDictionary());
    if (task)
      setTask(piece, TaskAttr::get(allReduce.getContext(), task.getKind(),
                                   task.getPhase(), task.getBlock(),
                                   task.getMicro(), index));
    if (annotate)
      annotate(index, piece);
    for (auto [t, result] : llvm::zip(chunk.tensors, piece.getResults()))
      current[t] = result;
  }
  allReduce.replaceAllUsesWith(current);
  allReduce.erase();
}

LogicalResult mlir::moe::chunkAllReduces(Operation *root, int64_t chunkBytes) {
  SmallVector<AllReduceOp> whole;
  root->walk([&](AllReduceOp op) {
    if (!op.isChunk() && !op->getParentOfType<VjpOp>())
      if (TaskAttr t = getTask(op); !t || t.getChunk() < 0)
        whole.push_back(op);
  });
  for (AllReduceOp op : whole)
    if (failed(chunkOne(op, chunkBytes)))
      return failure();
  return success();
}

namespace {
struct ChunkGradientsPass
    : public moe::impl::MoeChunkGradientsBase<ChunkGradientsPass> {
  using MoeChunkGradientsBase::MoeChunkGradientsBase;

  void runOnOperation() override {
    std::optional<int64_t> parsed = parseByteSize(chunkBytes);
    if (!parsed) {
      mlir::emitError(getOperation().getLoc())
          << "moe-chunk-gradients: chunk-bytes '" << chunkBytes
          << "' is not a positive size (e.g. 1048576, 512KiB, 2MiB, 4MB)";
      return signalPassFailure();
    }
    if (failed(chunkAllReduces(getOperation(), *parsed)))
      return signalPassFailure();
  }
};
} // namespace
