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

bool StreamOrder::isHostOp(Operation *op) {
  return op->hasTrait<OpTrait::ConstantLike>() ||
         op->hasTrait<OpTrait::IsTerminator>();
}

FailureOr<StreamOrder> StreamOrder::build(FunctionOpInterface func,
                                          bool requireStreams) {
  StreamOrder order;
  Region &body = func.getFunctionBody();
  if (!body.hasOneBlock())
    return func.emitError() << "a scheduled step must be one block";
  auto streamId = [&](StreamAttr stream) -> int {
    for (auto [i, s] : llvm::enumerate(order.streams))
      if (s == stream)
        return i;
    order.streams.push_back(stream);
    order.perStream.emplace_back();
    return order.streams.size() - 1;
  };
  // First pass: stream ids, so that clocks have a fixed width.
  for (Operation &op : body.front())
    if (StreamAttr stream = getStream(&op))
      streamId(stream);
  unsigned width = order.streams.size();
  std::vector<Clock> current(width, Clock(width, 0));
  llvm::DenseMap<Value, Clock> eventClocks;

  for (Operation &op : body.front()) {
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
      eventClocks[record.getEvent()] = current[s];
      continue;
    }
    if (auto wait = dyn_cast<WaitEventOp>(&op)) {
      auto it = eventClocks.find(wait.getEvent());
      if (it == eventClocks.end())
        return wait.emitOpError()
               << "waits on an event that is not recorded before it in this "
                  "step; the stream could wait forever";
      for (unsigned k = 0; k < width; ++k)
        current[s][k] = std::max(current[s][k], it->second[k]);
      continue;
    }
    Info &i = order.info[&op];
    i.stream = s;
    i.position = ++current[s][s];
    order.perStream[s].push_back(&op);
    i.clock = order.clocks.size();
    order.clocks.push_back(current[s]);
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
  if (x.stream == y.stream)
    return x.position < y.position;
  // b's stream has waited past a's position on a's stream.
  return clocks[y.clock][x.stream] >= x.position;
}

std::optional<CollectiveKey> mlir::moe::getCollectiveKey(Operation *op) {
  Operation *forward = op;
  if (auto vjp = dyn_cast<VjpOp>(op))
    forward = vjp.getForwardOp();
  if (!forward)
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
