//===- ModelStats.h - parameter and traffic volumes of a model --*- C++ -*-===//
//
// Sizes that FlowMoE's task model is built from (§2.2, Table 2): how many
// parameters are replicated (and so all-reduced) versus expert-local, and how
// many bytes each block's collectives move. Shared by the summary pass, the
// chunking pass and the cost model.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_MODELSTATS_H
#define MOE_ANALYSIS_MODELSTATS_H

#include "moe/Dialect/Moe/MoeOps.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include <vector>

namespace mlir::moe {

struct BlockStats {
  int64_t index = 0;
  /// Elements of replicated weights used in the block (attention, gate,
  /// norms, shared experts): what AR^(l) reduces.
  int64_t denseParams = 0;
  /// Bytes of those weights' gradients: the payload of AR^(l).
  int64_t allReduceBytes = 0;
  /// Elements of this rank's expert weights in the block.
  int64_t localExpertParams = 0;
  /// Bytes one rank sends in each dispatch all-to-all of the block (E x C x M
  /// slots, including its own share); the combine sends the same back.
  /// -1 when dropless (data-dependent).
  int64_t dispatchBytesPerRank = 0;
  int64_t numDispatches = 0;
};

struct ModelStats {
  ModelAttr model;
  int64_t epSize = 0, dpSize = 0, intraSize = 0, worldSize = 0;
  /// Replicated weights outside blocks (embeddings, final norm, LM head).
  int64_t outerDenseParams = 0;
  std::vector<BlockStats> blocks;

  int64_t totalDenseParams() const;
  /// Expert weights of all ranks of the expert-parallel group.
  int64_t totalExpertParams() const;
};

/// Computes the statistics of a model function (one with `moe.model`).
/// Fails with an error on `func` if the model or grid is malformed.
FailureOr<ModelStats> computeModelStats(FunctionOpInterface func);

/// Byte size of a static-shaped tensor value; -1 if dynamic.
int64_t tensorBytes(Type type);

} // namespace mlir::moe

#endif // MOE_ANALYSIS_MODELSTATS_H
