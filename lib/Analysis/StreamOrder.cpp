//===- StreamOrder.cpp - happens-before over streams and events -----------===//

#include "moe/Analysis/StreamOrder.h"

using namespace mlir;
using namespace mlir::moe;

StreamAttr StreamOrder::getStream(Operation *op) {
  if (auto record = dyn_cast<RecordEventOp>(op))
    return record.getStream();
  if (auto wait = dyn_cast<WaitEventOp>(op))
    return wait.getStream();
  return op->getAttrOfType<StreamAttr>(MoeDialect::getStreamAttrName());
}

bool StreamOrder::isLowPriority(Operation *op) {
  StreamAttr stream = getStream(op);
  if (!stream || stream.getKind() != StreamKind::comm ||
      isa<RecordEventOp, WaitEventOp>(op))
    return false;
  // Every all-reduce is: the runtime queues moe_rt_all_reduce_into on the
  // pool's low-priority queue whatever its task (the gradient-norm
  // all-reduce of clip-norm is an OPT task).
  if (isa<AllReduceOp>(op))
    return true;
  if (auto task = op->getAttrOfType<TaskAttr>(MoeDialect::getTaskAttrName()))
    return task.getKind() == TaskKind::AR;
  return false;
}

DenseMap<Operation *, Operation *> StreamOrder::eventAnchors(Block &block) {
  DenseMap<Operation *, Operation *> anchors;
  DenseMap<Attribute, Operation *> last;
  SmallVector<Operation *> pendingWaits;
  for (Operation &op : block) {
    StreamAttr stream = getStream(&op);
    if (!stream)
      continue;
    if (isa<RecordEventOp>(op)) {
      anchors[&op] = last.lookup(stream);
    } else if (isa<WaitEventOp>(op)) {
      anchors[&op] = nullptr;
      pendingWaits.push_back(&op);
    } else {
      last[stream] = &op;
      // Waits of this stream that precede this task gate its queue.
      llvm::erase_if(pendingWaits, [&](Operation *wait) {
        if (getStream(wait) != stream)
          return false;
        anchors[wait] = &op;
        return true;
      });
    }
  }
  return anchors;
}

bool StreamOrder::isHostOp(Operation *op) {
  return op->hasTrait<OpTrait::ConstantLike>() ||
         op->hasTrait<OpTrait::IsTerminator>();
}

FailureOr<StreamOrder> StreamOrder::build(FunctionOpInterface func,
                                          bool requireStreams) {
  StreamOrder order;
  Region &body = func.getFunctionBody();
  if (!body.hasOneBlock())
    return mlir::emitError(func.getLoc())
           << "a scheduled step must be one block";
  Block &block = body.front();
  auto streamId = [&](StreamAttr stream) -> int {
    for (auto [i, s] : llvm::enumerate(order.streams))
      if (s == stream)
        return i;
    order.streams.push_back(stream);
    order.perStream.emplace_back();
    return order.streams.size() - 1;
  };
  // Queues: (stream, low priority); ids fixed before clocks are built.
  SmallVector<std::pair<int, bool>> queues;
  auto queueId = [&](int stream, bool low) -> int {
    for (auto [i, q] : llvm::enumerate(queues))
      if (q.first == stream && q.second == low)
        return i;
    queues.push_back({stream, low});
    return queues.size() - 1;
  };
  for (Operation &op : block)
    if (StreamAttr stream = getStream(&op)) {
      int s = streamId(stream);
      if (!isa<RecordEventOp, WaitEventOp>(op))
        queueId(s, isLowPriority(&op));
    }
  DenseMap<Operation *, Operation *> anchors = eventAnchors(block);
  unsigned width = queues.size();
  std::vector<Clock> current(width, Clock(width, 0));
  llvm::DenseMap<Value, Clock> eventClocks;
  auto queueOfTask = [&](Operation *task) {
    return queueId(streamId(getStream(task)), isLowPriority(task));
  };

  for (Operation &op : block) {
    StreamAttr stream = getStream(&op);
    if (!stream) {
      if (requireStreams && !isHostOp(&op))
        return op.emitOpError()
               << "is not on a stream in a scheduled step (moe-schedule puts "
                  "every task on one)";
      continue;
    }
    int s = streamId(stream);
    if (auto record = dyn_cast<RecordEventOp>(&op)) {
      Operation *producer = anchors.lookup(&op);
      eventClocks[record.getEvent()] =
          producer ? order.clocks[order.info[producer].clock] : Clock(width, 0);
      continue;
    }
    if (auto wait = dyn_cast<WaitEventOp>(&op)) {
      auto it = eventClocks.find(wait.getEvent());
      if (it == eventClocks.end())
        return wait.emitOpError()
               << "waits on an event that is not recorded before it in this "
                  "step; the stream could wait forever";
      if (Operation *target = anchors.lookup(&op)) {
        int q = queueOfTask(target);
        for (unsigned k = 0; k < width; ++k)
          current[q][k] = std::max(current[q][k], it->second[k]);
      }
      continue;
    }
    int q = queueId(s, isLowPriority(&op));
    Info &i = order.info[&op];
    i.stream = s;
    i.queue = q;
    i.position = ++current[q][q];
    order.perStream[s].push_back(&op);
    i.clock = order.clocks.size();
    order.clocks.push_back(current[q]);
  }
  return order;
}

bool StreamOrder::happensBefore(Operation *a, Operation *b) const {
  auto ia = info.find(a), ib = info.find(b);
  if (ia == info.end())
    return true; // host values are ready before the step starts
  if (ib == info.end())
    return false;
  const Info &x = ia->second, &y = ib->second;
  if (x.queue == y.queue)
    return x.position < y.position;
  // b's queue has waited past a's position in a's queue.
  return clocks[y.clock][x.queue] >= x.position;
}

std::optional<CollectiveKey> mlir::moe::getCollectiveKey(Operation *op) {
  Operation *forward = op;
  if (auto vjp = dyn_cast<VjpOp>(op))
    forward = vjp.getForwardOp();
  // A host planner names a group for its problem's shape only: it issues
  // no collective.
  if (!forward || isHostPlanner(forward))
    return std::nullopt;
  CollectiveKey key;
  if (auto collective = dyn_cast<CollectiveOpInterface>(forward)) {
    key.grid = collective.getGridAttr();
    llvm::append_range(key.axes, collective.getAxes());
    key.allReduceClass = isa<AllReduceOp>(forward);
    return key;
  }
  return std::nullopt;
}
