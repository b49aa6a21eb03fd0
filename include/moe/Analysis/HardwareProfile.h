//===- HardwareProfile.h - alpha-beta models of a cluster -------*- C++ -*-===//
//
// What the cost model knows about hardware (docs/profile-format.md): the
// mesh, an alpha-beta model per compute class (GEMM-bound, memory-bound)
// and per collective within and across nodes, and a per-task launch cost.
// t = alpha + beta * n, n in flops or bytes, times in microseconds.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_HARDWAREPROFILE_H
#define MOE_ANALYSIS_HARDWAREPROFILE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace mlir::moe {

struct AlphaBeta {
  double alphaUs = 0.0;
  double betaUs = 0.0; // per flop or per byte
  double time(double n) const { return alphaUs + betaUs * n; }
};

enum class CollectiveKind { AllToAll, AllReduce, AllGather, ReduceScatter };

struct CollectiveModel {
  AlphaBeta intra, inter;
};

struct HardwareProfile {
  std::string name, description;
  int64_t nodes = 1, gpusPerNode = 1;
  double launchUs = 0.0;
  /// Backward compute time over forward compute time for the same op.
  double backwardFactor = 2.0;
  AlphaBeta gemm, memory;
  CollectiveModel allToAll, allReduce, allGather, reduceScatter;

  const CollectiveModel &collective(CollectiveKind kind) const;

  /// Parses and validates a profile; the error names the offending field.
  static llvm::Expected<HardwareProfile> parse(llvm::StringRef json,
                                               llvm::StringRef source);
  /// A preset name (see presetNames) or a path to a JSON file.
  static llvm::Expected<HardwareProfile> load(llvm::StringRef nameOrPath);
  static std::vector<std::string> presetNames();
  /// The profile as JSON, in the format `parse` reads.
  std::string toJson() const;
};

} // namespace mlir::moe

#endif // MOE_ANALYSIS_HARDWAREPROFILE_H
