//===- Simulator.cpp - timeline of a scheduled step -----------------------===//

#include "moe/Analysis/Simulator.h"
#include "moe/Analysis/ListScheduler.h"
#include "moe/Analysis/ModelStats.h"
#include "moe/Analysis/StreamOrder.h"
#include "moe/Analysis/Tasks.h"
#include "moe/Target/ProfileOpClass.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <limits>
#include <map>

using namespace mlir;
using namespace mlir::moe;

namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

/// Total length of the union of intervals.
double unionLength(std::vector<std::pair<double, double>> v) {
  std::sort(v.begin(), v.end());
  double total = 0, start = -kUnknown, end = -kUnknown;
  for (auto [s, e] : v) {
    if (s > end) {
      total += end - start > 0 ? end - start : 0;
      start = s;
      end = e;
    } else {
      end = std::max(end, e);
    }
  }
  if (end > start)
    total += end - start;
  return total;
}

double intersectionLength(std::vector<std::pair<double, double>> a,
                          std::vector<std::pair<double, double>> b) {
  // |A ∩ B| = |A| + |B| - |A ∪ B|
  double ua = unionLength(a), ub = unionLength(b);
  a.insert(a.end(), b.begin(), b.end());
  return ua + ub - unionLength(a);
}

/// The grid and axes of a communication task's collective (of its forward
/// op for a vjp).
std::optional<std::pair<FlatSymbolRefAttr, ArrayRef<int16_t>>>
collectiveGroup(Operation *op) {
  if (auto vjp = dyn_cast<VjpOp>(op))
    op = vjp.getForwardOp();
  if (isa<shard::AllGatherOp, shard::ReduceScatterOp>(op))
    return std::make_pair(
        op->getAttrOfType<FlatSymbolRefAttr>("grid"),
        op->getAttrOfType<DenseI16ArrayAttr>("grid_axes").asArrayRef());
  if (auto c = dyn_cast<CollectiveOpInterface>(op))
    return std::make_pair(c.getGridAttr(), c.getAxes());
  return std::nullopt;
}

/// The joint simulation of every rank (ListScheduler.h, coupledSchedule):
/// each task costed on each rank (CostModel::setRank), each collective's
/// group from its grid and axes. Fills `queued`'s times and `tasks`' costs
/// with those of the rank that finishes last, which the result then
/// reports. False when the step's collectives do not share one grid of at
/// least two ranks (the per-rank simulation is used then).
FailureOr<bool> simulateRanksJointly(std::vector<SimulatedTask> &tasks,
                                     std::vector<QueuedTask> &queued,
                                     CostModel &model,
                                     const std::vector<bool> &isComm,
                                     const std::vector<bool> &isHost) {
  SymbolTableCollection symbols;
  int64_t ranks = 0;
  CoupledRanks coupled;
  coupled.groupKey.resize(tasks.size());
  std::vector<SmallVector<int64_t>> shapes(tasks.size());
  for (auto [t, task] : llvm::enumerate(tasks)) {
    if (!task.communication)
      continue;
    auto group = collectiveGroup(task.op);
    if (!group)
      return false;
    FailureOr<shard::GridOp> grid = lookupGrid(task.op, group->first, symbols);
    if (failed(grid))
      return failure();
    int64_t size = 1;
    for (int64_t extent : grid->getShape())
      size *= extent;
    if (ranks && size != ranks)
      return false;
    ranks = size;
    for (int64_t r = 0; r < size; ++r)
      coupled.groupKey[t].push_back(
          groupPosition(grid->getShape(), group->second, r).second);
  }
  if (ranks < 2)
    return false;
  std::vector<std::vector<TaskCost>> costs(ranks);
  coupled.durationUs.resize(ranks);
  for (int64_t r = 0; r < ranks; ++r) {
    model.setRank(r);
    for (const SimulatedTask &task : tasks) {
      FailureOr<TaskCost> c = model.cost(task.op);
      if (failed(c)) {
        model.setRank(std::nullopt);
        return failure();
      }
      costs[r].push_back(*c);
      coupled.durationUs[r].push_back(c->us);
    }
  }
  model.setRank(std::nullopt);
  const HardwareProfile &hw = model.getProfile();
  if (!coupledSchedule(queued, coupled, isComm, hw.commCpuShare,
                       hw.commStretch, hw.partialStretch(), isHost))
    return tasks.front().op->getParentOp()->emitError()
           << "simulation of every rank cannot progress: every stream of "
              "every rank waits for a task that cannot start";
  int64_t last = 0;
  double lastEnd = 0;
  for (int64_t r = 0; r < ranks; ++r)
    for (double end : coupled.endUs[r])
      if (end > lastEnd) {
        lastEnd = end;
        last = r;
      }
  for (size_t t = 0; t < tasks.size(); ++t) {
    tasks[t].cost = costs[last][t];
    queued[t].startUs = coupled.startUs[last][t];
    queued[t].endUs = coupled.endUs[last][t];
  }
  return true;
}

} // namespace

void mlir::moe::summarizeTimeline(SimulationResult &result,
                                  llvm::ArrayRef<std::string> streamNames,
                                  const std::vector<bool> &isCommStream) {
  std::vector<std::pair<double, double>> compute, comm, inter, intra;
  result.iterationUs = result.computeBusyUs = result.commBusyUs = 0;
  result.hostBusyUs = 0;
  result.interCommBusyUs = result.intraCommBusyUs = 0;
  for (const SimulatedTask &t : result.tasks) {
    result.iterationUs = std::max(result.iterationUs, t.endUs);
    if (t.host) {
      // A host thread's solve: its own resource, neither compute nor a link.
      result.hostBusyUs += t.cost.us;
      continue;
    }
    (t.communication ? result.commBusyUs : result.computeBusyUs) += t.cost.us;
    if (t.cost.link == Link::Inter) {
      result.interCommBusyUs += t.cost.us;
      inter.push_back({t.startUs, t.endUs});
    } else if (t.cost.link == Link::Intra) {
      result.intraCommBusyUs += t.cost.us;
      intra.push_back({t.startUs, t.endUs});
    }
    (t.communication ? comm : compute).push_back({t.startUs, t.endUs});
  }
  result.overlapUs = intersectionLength(compute, comm);
  result.linkOverlapUs = intersectionLength(inter, intra);
  result.exposedCommUs = unionLength(comm) - result.overlapUs;
  // Each stream runs one task at a time: none finishes before its busiest
  // stream (max(compute, communication) with one stream of each).
  std::vector<double> streamBusy(streamNames.size(), 0.0);
  for (const SimulatedTask &t : result.tasks)
    streamBusy[t.stream] += t.cost.us;
  result.lowerBoundUs = 0;
  for (double busy : streamBusy)
    result.lowerBoundUs = std::max(result.lowerBoundUs, busy);

  // With several communication streams (FSMoE's inter- and intra-node
  // links), a track's name says which links its collectives use.
  std::vector<unsigned> linksOf(streamNames.size(), 0); // 1 intra, 2 inter
  for (const SimulatedTask &t : result.tasks)
    if (t.cost.link != Link::None)
      linksOf[t.stream] |= t.cost.link == Link::Inter ? 2 : 1;
  size_t commStreams = llvm::count(isCommStream, true);
  result.streamNames.clear();
  for (auto [i, name] : llvm::enumerate(streamNames)) {
    std::string track = name;
    if (isCommStream[i] && commStreams > 1 && linksOf[i])
      track += linksOf[i] == 1   ? " (intra-node)"
               : linksOf[i] == 2 ? " (inter-node)"
                                 : " (intra- and inter-node)";
    result.streamNames.push_back(track);
  }
}

FailureOr<SimulationResult> mlir::moe::simulate(FunctionOpInterface func,
                                                CostModel &model) {
  Region &body = func.getFunctionBody();
  if (!body.hasOneBlock())
    return mlir::emitError(func.getLoc())
           << "a scheduled step must be one block";
  SimulationResult result;
  std::vector<StreamAttr> streams;
  auto streamId = [&](StreamAttr s) -> int {
    for (auto [i, known] : llvm::enumerate(streams))
      if (known == s)
        return i;
    streams.push_back(s);
    return streams.size() - 1;
  };

  // Tasks and the events each waits for.
  std::vector<QueuedTask> queued;
  // A wait gates the queue of the next task on its stream (StreamOrder.h);
  // an event completes with the task recorded after.
  std::vector<std::vector<unsigned>> pendingWaits; // per stream
  std::vector<int> lastTaskOnStream;
  DenseMap<Value, int> eventProducer; // -1: completes at time 0
  DenseMap<Operation *, unsigned> taskOf;

  for (Operation &op : body.front()) {
    StreamAttr stream = StreamOrder::getStream(&op);
    if (!stream) {
      if (!StreamOrder::isHostOp(&op))
        return op.emitOpError() << "is not on a stream; simulate a scheduled "
                                   "step (after moe-schedule)";
      continue;
    }
    int s = streamId(stream);
    if (static_cast<size_t>(s) >= pendingWaits.size()) {
      pendingWaits.resize(s + 1);
      lastTaskOnStream.resize(s + 1, -1);
    }
    if (auto record = dyn_cast<RecordEventOp>(&op)) {
      eventProducer[record.getEvent()] = lastTaskOnStream[s];
      continue;
    }
    if (auto wait = dyn_cast<WaitEventOp>(&op)) {
      auto it = eventProducer.find(wait.getEvent());
      if (it == eventProducer.end())
        return wait.emitOpError() << "waits on an event not recorded before "
                                     "it";
      if (it->second >= 0)
        pendingWaits[s].push_back(it->second);
      continue;
    }
    FailureOr<TaskCost> cost = model.cost(&op);
    if (failed(cost))
      return failure();
    SimulatedTask task;
    task.op = &op;
    TaskAttr label = getTask(&op);
    task.label = label ? label.getLabel() : op.getName().getStringRef().str();
    task.stream = s;
    task.communication = cost->communication;
    task.host = stream.getKind() == StreamKind::host;
    task.lowPriority = StreamOrder::isLowPriority(&op);
    task.cost = *cost;
    unsigned index = result.tasks.size();
    result.tasks.push_back(task);
    QueuedTask q;
    q.stream = s;
    q.lowPriority = task.lowPriority;
    q.durationUs = cost->us;
    q.deps = std::move(pendingWaits[s]);
    pendingWaits[s].clear();
    queued.push_back(std::move(q));
    lastTaskOnStream[s] = index;
    taskOf[&op] = index;
  }

  std::vector<std::string> names;
  std::vector<bool> isComm, isHost;
  for (StreamAttr st : streams) {
    names.push_back(
        (stringifyStreamKind(st.getKind()) +
         (st.getIndex() ? llvm::Twine(st.getIndex()) : llvm::Twine("")))
            .str());
    isComm.push_back(st.getKind() == StreamKind::comm);
    isHost.push_back(st.getKind() == StreamKind::host);
  }
  // On a CPU cluster compute and communication share the rank's core
  // (HardwareProfile::commCpuShare, commStretch): each stretches while the
  // other runs.
  double share = model.getProfile().commCpuShare,
         stretch = model.getProfile().commStretch;
  bool contended =
      share > 0 || stretch > 1 || model.getProfile().partialStretch() > 1;
  // Recorded routing gives the ranks different work; on a CPU cluster their
  // collectives then couple them (a collective waits for every rank's post
  // and is slowed by any rank's compute): simulate every rank.
  FailureOr<bool> joint = contended && model.hasRoutingLoads()
                              ? simulateRanksJointly(result.tasks, queued,
                                                     model, isComm, isHost)
                              : FailureOr<bool>(false);
  if (failed(joint))
    return failure();
  bool scheduled = *joint || (contended ? contendedSchedule(queued, isComm,
                                                            share, stretch,
                                                            isHost)
                                        : listSchedule(queued));
  if (!scheduled)
    return mlir::emitError(func.getLoc())
           << "simulation cannot progress: every stream "
              "waits for a task that cannot start";
  for (auto [task, q] : llvm::zip_equal(result.tasks, queued)) {
    task.startUs = q.startUs;
    task.endUs = q.endUs;
    // A stretched task occupies its stream (and counts as busy) for its
    // whole span.
    if (contended)
      task.cost.us = q.endUs - q.startUs;
  }

  summarizeTimeline(result, names, isComm);

  // Gradients held from the task that completes them to the all-reduce
  // (chunk) that reduces them.
  std::vector<std::pair<double, double>> deltas;
  for (const SimulatedTask &t : result.tasks) {
    auto ar = dyn_cast<AllReduceOp>(t.op);
    if (!ar)
      continue;
    for (Value input : ar.getInputs()) {
      Value origin = input;
      while (auto prev = origin.getDefiningOp<AllReduceOp>())
        origin = prev.getInputs()[cast<OpResult>(origin).getResultNumber()];
      Operation *producer = origin.getDefiningOp();
      auto it = producer ? taskOf.find(producer) : taskOf.end();
      double from = it == taskOf.end() ? 0.0 : result.tasks[it->second].endUs;
      double bytes = t.cost.bytes;
      if (!ar.isChunk())
        bytes = tensorBytes(input.getType());
      deltas.push_back({from, bytes});
      deltas.push_back({t.endUs, -bytes});
    }
  }
  std::sort(deltas.begin(), deltas.end(), [](auto a, auto b) {
    return a.first < b.first || (a.first == b.first && a.second < b.second);
  });
  double held = 0;
  for (auto [time, delta] : deltas) {
    held += delta;
    result.peakPendingGradientBytes =
        std::max(result.peakPendingGradientBytes, held);
  }

  return result;
}

std::string mlir::moe::chromeTrace(const SimulationResult &result,
                                   int64_t ranks, llvm::StringRef name) {
  llvm::json::Array events;
  for (int64_t rank = 0; rank < ranks; ++rank) {
    events.push_back(llvm::json::Object{
        {"name", "process_name"},
        {"ph", "M"},
        {"pid", rank},
        {"args",
         llvm::json::Object{{"name", ("rank " + llvm::Twine(rank)).str()}}}});
    for (auto [i, stream] : llvm::enumerate(result.streamNames))
      events.push_back(
          llvm::json::Object{{"name", "thread_name"},
                             {"ph", "M"},
                             {"pid", rank},
                             {"tid", static_cast<int64_t>(i)},
                             {"args", llvm::json::Object{{"name", stream}}}});
    for (const SimulatedTask &t : result.tasks)
      events.push_back(llvm::json::Object{
          {"name", t.label},
          {"cat", t.host            ? "host"
                  : t.communication ? (t.lowPriority ? "all-reduce" : "comm")
                                    : "compute"},
          {"ph", "X"},
          {"ts", t.startUs},
          {"dur", t.cost.us},
          {"pid", rank},
          {"tid", static_cast<int64_t>(t.stream)},
          {"args",
           llvm::json::Object{{"op", t.op ? t.op->getName().getStringRef().str()
                                          : t.label},
                              // moe-run --profile's class of the op.
                              {"class", t.op ? target::profileOpClass(t.op)
                                             : t.label},
                              {"flops", t.cost.flops},
                              {"bytes", t.cost.bytes},
                              {"link", t.cost.link == Link::Inter
                                           ? "inter-node"
                                       : t.cost.link == Link::Intra
                                           ? "intra-node"
                                           : "none"}}}});
  }
  llvm::json::Object root{
      {"traceEvents", std::move(events)},
      {"displayTimeUnit", "ms"},
      {"otherData",
       llvm::json::Object{{"model", name.str()}, {"note", "simulated"}}}};
  return llvm::formatv("{0}", llvm::json::Value(std::move(root)));
}
