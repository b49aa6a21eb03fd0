//===- StreamOrder.h - happens-before over streams and events ---*- C++ -*-===//
//
// The execution model of a scheduled step: every task op sits on one stream
// (`moe.stream`). A compute stream is one in-order queue. A communication
// stream is a pool of two in-order queues sharing one link: all-reduce
// chunks (low priority) and everything else (FlowMoE Alg. 2), so a chunk
// waiting for its gradient never holds back an all-to-all. A host stream
// (host planners, docs/host-planners.md) is one in-order queue too. A
// `moe.wait_event` gates the queue of the next task on its stream; a
// `moe.record_event` completes with the task before it on its stream (and,
// by queue order, everything earlier in that task's queue). Events are the
// only edges between queues. This analysis gives every op a vector clock
// over queues, so that "does a complete before b starts" is one comparison.
// The schedule verifier, the sync insertion pass and the simulator share
// these rules.
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
  /// 1-based position of an op in its queue.
  int64_t positionOf(Operation *op) const { return info.lookup(op).position; }
  StreamAttr streamAttr(int id) const { return streams[id]; }
  unsigned numStreams() const { return streams.size(); }
  /// The ops of stream `id` in issue order.
  ArrayRef<Operation *> opsOn(int id) const { return perStream[id]; }

  /// The stream attribute of an op, or null.
  static StreamAttr getStream(Operation *op);
  /// Whether a task goes to its communication stream's low-priority queue
  /// (an all-reduce, i.e. an AR task or chunk).
  static bool isLowPriority(Operation *op);
  /// For each `moe.wait_event` in `block`, the next task on its stream (the
  /// one whose queue it gates), or null; for each `moe.record_event`, the
  /// task before it on its stream, or null.
  static DenseMap<Operation *, Operation *> eventAnchors(Block &block);
  /// Whether an op needs no stream: constants, event ops, terminators.
  static bool isHostOp(Operation *op);

private:
  struct Info {
    int stream = -1;
    int queue = -1;
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
