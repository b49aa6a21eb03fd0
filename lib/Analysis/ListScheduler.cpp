//===- ListScheduler.cpp - in-order queues on shared resources ------------===//

#include "moe/Analysis/ListScheduler.h"

#include <algorithm>
#include <limits>

using namespace mlir::moe;

namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

struct Queue {
  unsigned stream;
  bool low;
  std::vector<unsigned> tasks;
  size_t next = 0;
};

} // namespace

bool mlir::moe::listSchedule(std::vector<QueuedTask> &tasks) {
  // Queues in order of first appearance: ties between streams go to the
  // queue seen first.
  std::vector<Queue> queues;
  unsigned numStreams = 0;
  for (unsigned t = 0; t < tasks.size(); ++t) {
    const QueuedTask &task = tasks[t];
    numStreams = std::max(numStreams, task.stream + 1);
    auto it = std::find_if(queues.begin(), queues.end(), [&](const Queue &q) {
      return q.stream == task.stream && q.low == task.lowPriority;
    });
    if (it == queues.end()) {
      queues.push_back({task.stream, task.lowPriority, {}, 0});
      it = queues.end() - 1;
    }
    it->tasks.push_back(t);
  }

  std::vector<double> end(tasks.size(), kUnknown);
  std::vector<double> streamFree(numStreams, 0.0);
  for (size_t remaining = tasks.size(); remaining; --remaining) {
    double bestStart = kUnknown;
    Queue *best = nullptr;
    for (Queue &q : queues) {
      if (q.next >= q.tasks.size())
        continue;
      unsigned t = q.tasks[q.next];
      double ready = streamFree[q.stream];
      if (q.next > 0)
        ready = std::max(ready, end[q.tasks[q.next - 1]]);
      for (unsigned producer : tasks[t].deps)
        ready = std::max(ready, end[producer]);
      // Prefer the high-priority queue of a stream on ties.
      if (ready < bestStart ||
          (ready == bestStart && best && best->stream == q.stream &&
           best->low && !q.low)) {
        bestStart = ready;
        best = &q;
      }
    }
    if (!best || bestStart == kUnknown)
      return false;
    unsigned t = best->tasks[best->next++];
    tasks[t].startUs = bestStart;
    tasks[t].endUs = bestStart + tasks[t].durationUs;
    end[t] = tasks[t].endUs;
    streamFree[best->stream] = tasks[t].endUs;
  }
  return true;
}
