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

#include <map>
#include <optional>
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

/// One measured host-planner solve (docs/host-planners.md): the problem's
/// shape (integer fields the planner op names, e.g. samples, nodes,
/// ranks_per_node, experts for moe.plan_placement) and its time.
struct HostPlannerPoint {
  std::map<std::string, int64_t> shape;
  double us = 0.0;
};

struct HardwareProfile {
  std::string name, description;
  int64_t nodes = 1, gpusPerNode = 1;
  double launchUs = 0.0;
  /// Backward compute time over forward compute time for the same op.
  double backwardFactor = 2.0;
  AlphaBeta gemm, memory;
  CollectiveModel allToAll, allReduce, allGather, reduceScatter;
  /// Measured time / modelled time of the compute tasks of an op class
  /// (the class moe-run --profile charges: "moe.attention",
  /// "moe.vjp(moe.expert)"): how far the runtime's own kernels are from the
  /// GEMM / memory rates (bench/calibrate_ops.py measures it). Classes not
  /// listed are 1.
  std::map<std::string, double> opScale;
  /// The share of a core a running collective takes from the compute
  /// stream of its rank (TCP and MPI progress on the rank's own CPU;
  /// moe-profile measures it). 0 on GPUs, whose copy engines and NICs take
  /// nothing from the SMs.
  double commCpuShare = 0.0;
  /// How many times longer a collective takes while its rank's compute
  /// stream runs a task (the pool thread that progresses MPI shares the
  /// core with the GEMMs; moe-profile measures it). 1 on GPUs.
  double commStretch = 1.0;
  /// The stretch of a collective while some ranks of its group compute and
  /// the others do not (each rank's part waits for the computing ranks'
  /// pool threads; moe-profile measures it with GEMMs on the odd ranks
  /// only). Only the joint simulation of every rank tells the cases apart
  /// (ListScheduler.h, coupledSchedule); absent: commStretch.
  std::optional<double> commStretchPartial;
  double partialStretch() const {
    return commStretchPartial.value_or(commStretch);
  }
  /// What every collective of the runtime takes beyond its α–β time: the
  /// pool's issue and polling, MPI's protocol round trips on the links
  /// (moe-profile measures a 4-byte collective through the runtime). The
  /// sweeps' α, fitted over kilobytes to megabytes, does not see it.
  double collectiveLatencyUs = 0.0;
  /// Per collective kind (indexed by CollectiveKind): the runtime's own
  /// collective -- non-blocking MPI on a pool stream, progressed by the
  /// pool's polling, as a step runs it -- over what collectiveLatencyUs and
  /// the α–β fit of MPI's blocking one give it (moe-profile measures it at a
  /// few sizes;
  /// the all-reduce's libnbc rounds advance only when the pool polls, which
  /// costs more once its messages pass the eager limit). Between measured
  /// sizes the ratio is interpolated in log2(bytes), beyond them the
  /// nearest is used; no sizes: 1.
  struct ScaleBySize {
    std::vector<double> bytes, scale; // bytes increasing
    double at(double n) const;
  };
  ScaleBySize runtimeCollectiveScale[4];
  /// Measured solve times of host planners, by planner op name
  /// ("moe.plan_placement"): what the simulator charges on a host stream.
  /// A planner whose shape has no point here cannot be simulated.
  std::map<std::string, std::vector<HostPlannerPoint>> hostPlanners;

  double runtimeScaleOf(CollectiveKind kind, double bytes) const {
    return runtimeCollectiveScale[static_cast<int>(kind)].at(bytes);
  }
  double opScaleOf(llvm::StringRef opClass) const;
  /// The measured time of planner `op` at exactly `shape`, if any.
  std::optional<double>
  hostPlannerUs(llvm::StringRef op,
                const std::map<std::string, int64_t> &shape) const;

  const CollectiveModel &collective(CollectiveKind kind) const;

  /// Parses and validates a profile; the error names the offending field.
  static llvm::Expected<HardwareProfile> parse(llvm::StringRef json,
                                               llvm::StringRef source);
  /// A preset name (see presetNames) or a path to a JSON file.
  static llvm::Expected<HardwareProfile> load(llvm::StringRef nameOrPath);
  /// `load` for the value of an option every pass or tool that prices a
  /// step requires: an empty one is an error naming `option` (as the user
  /// writes it, e.g. "profile=" or "--profile ") and listing the presets.
  static llvm::Expected<HardwareProfile> loadOption(llvm::StringRef option,
                                                    llvm::StringRef value);
  static std::vector<std::string> presetNames();
  /// The profile as JSON, in the format `parse` reads.
  std::string toJson() const;
};

} // namespace mlir::moe

#endif // MOE_ANALYSIS_HARDWAREPROFILE_H
