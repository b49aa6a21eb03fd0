//===- StreamOrder.h - happens-before over streams and events ---*- C++ -*-===//
//
// The execution model of a scheduled step: every task op sits on one stream
// (`moe.stream`), a stream runs its ops in program order, and
// `moe.record_event` / `moe.wait_event` are the only edges between streams.
// This analysis gives every op a vector clock, so that "does a complete
// before b starts" is one comparison. The schedule verifier, the sync
// insertion pass and the simulator share it.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_ANALYSIS_STREAMORDER_H
#define MOE_ANALYSIS_STREAMORDER_H

#include "moe/Dialect/Moe/MoeOps.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include <vector>

namespace mlir::moe {

class StreamOrder {
public:
  using Clock = std::vector<int64_t>;

  /// Builds the order of the top-level ops of `func`'s body, which must be
  /// one block. Ops without a stream are host values (function arguments,
  /// constants) unless `requireStreams`, in which case any other op without
  /// a stream is an error.
  static FailureOr<StreamOrder> build(FunctionOpInterface func,
                                      bool requireStreams);

  /// Whether `a` completes before `b` starts (same stream and earlier, or
  /// ordered by a chain of waits). Host ops happen before everything.
  bool happensBefore(Operation *a, Operation *b) const;

  /// Stream id of an op (-1 for host ops and event ops).
  int streamOf(Operation *op) const { return info.lookup(op).stream; }
  /// 1-based position of an op on its stream.
  int64_t positionOf(Operation *op) const { return info.lookup(op).position; }
  StreamAttr streamAttr(int id) const { return streams[id]; }
  unsigned numStreams() const { return streams.size(); }
  /// The ops of stream `id` in issue order.
  ArrayRef<Operation *> opsOn(int id) const { return perStream[id]; }

  /// The stream attribute of an op, or null.
  static StreamAttr getStream(Operation *op);
  /// Whether an op needs no stream: constants, event ops, terminators.
  static bool isHostOp(Operation *op);

private:
  struct Info {
    int stream = -1;
    int64_t position = 0;
    unsigned clock = 0; // index into clocks
  };
  std::vector<StreamAttr> streams;
  std::vector<std::vector<Operation *>> perStream;
  std::vector<Clock> clocks;
  llvm::DenseMap<Operation *, Info> info;
};

/// Collective ops whose relative order must agree across ranks: the moe
/// collectives, their vjps and upstream shard collectives. Returns the
/// grid and axes of the group, or failure for a non-collective.
struct CollectiveKey {
  FlatSymbolRefAttr grid;
  SmallVector<int16_t> axes;
  /// All-reduce chunks go through the priority pool, which may reorder them
  /// against all-to-alls; the runtime gives each class its own communicator,
  /// so only collectives of one class must be totally ordered.
  bool allReduceClass = false;
};
std::optional<CollectiveKey> getCollectiveKey(Operation *op);

} // namespace mlir::moe

#endif // MOE_ANALYSIS_STREAMORDER_H
