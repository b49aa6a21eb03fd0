//===- Passes.h - moe passes ------------------------------------*- C++ -*-===//
#ifndef MOE_TRANSFORMS_PASSES_H
#define MOE_TRANSFORMS_PASSES_H

#include "moe/Analysis/Chunking.h"
#include "moe/Dialect/Moe/MoeOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace mlir::moe {

#define GEN_PASS_DECL
#include "moe/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moe/Transforms/Passes.h.inc"

/// Registers moe-flowmoe-pipeline.
void registerMoePipelines();

/// The transformations behind moe-chunk-gradients and moe-insert-syncs, for
/// passes that apply them to copies (moe-autotune).
LogicalResult chunkAllReduces(Operation *root, int64_t chunkBytes);
LogicalResult insertSyncs(FunctionOpInterface func);

/// Replaces a whole `moe.all_reduce` by one op per chunk, in order (a later
/// chunk of a tensor takes the earlier one's result), each labelled with
/// its chunk index and given `annotate(index, op)`: moe-chunk-gradients'
/// S_p chunks and moe-fsmoe-plan's slices.
void replaceByChunks(AllReduceOp allReduce, ArrayRef<GradientChunk> chunks,
                     function_ref<void(unsigned, AllReduceOp)> annotate = {});

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_PASSES_H
