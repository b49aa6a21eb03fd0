//===- ListScheduler.cpp - in-order queues on shared resources ------------===//

#include "moe/Analysis/ListScheduler.h"

#include <algorithm>
#include <array>
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

/// A stream's queues in order of first appearance (the high-priority queue
/// of a stream before its low one when both exist).
std::vector<Queue> makeQueues(const std::vector<QueuedTask> &tasks,
                              unsigned &numStreams) {
  std::vector<Queue> queues;
  numStreams = 0;
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
  return queues;
}

} // namespace

bool mlir::moe::contendedSchedule(std::vector<QueuedTask> &tasks,
                                  const std::vector<bool> &commStream,
                                  double commCpuShare, double commStretch,
                                  const std::vector<bool> &hostStream) {
  unsigned numStreams;
  std::vector<Queue> queues = makeQueues(tasks, numStreams);
  std::vector<bool> done(tasks.size(), false);
  std::vector<int> running(numStreams, -1); // task index per stream
  std::vector<double> left(tasks.size());   // work still to do, us
  for (unsigned t = 0; t < tasks.size(); ++t)
    left[t] = tasks[t].durationUs;
  auto isComm = [&](unsigned s) { return s < commStream.size() && commStream[s]; };
  auto isHost = [&](unsigned s) { return s < hostStream.size() && hostStream[s]; };
  auto readyAt = [&](const Queue &q) {
    if (q.next >= q.tasks.size())
      return false;
    if (q.next > 0 && !done[q.tasks[q.next - 1]])
      return false;
    for (unsigned producer : tasks[q.tasks[q.next]].deps)
      if (!done[producer])
        return false;
    return true;
  };
  double now = 0;
  for (size_t finished = 0; finished < tasks.size();) {
    // Start what can start now: per free stream its high-priority queue's
    // head, else its low one's (Alg. 2).
    for (unsigned s = 0; s < numStreams; ++s) {
      if (running[s] >= 0)
        continue;
      Queue *pick = nullptr;
      for (Queue &q : queues)
        if (q.stream == s && readyAt(q) && (!pick || (pick->low && !q.low)))
          pick = &q;
      if (!pick)
        continue;
      unsigned t = pick->tasks[pick->next++];
      tasks[t].startUs = now;
      running[s] = t;
    }
    // Rates until the next task ends.
    int collectives = 0, computing = 0;
    for (unsigned s = 0; s < numStreams; ++s) {
      collectives += running[s] >= 0 && isComm(s);
      computing += running[s] >= 0 && !isComm(s) && !isHost(s);
    }
    double computeRate = 1 - std::min(0.95, commCpuShare * collectives);
    // The pool thread shares the core with a running compute task.
    double commRate = computing ? 1 / commStretch : 1.0;
    auto rateOf = [&](unsigned s) {
      return isHost(s) ? 1.0 : isComm(s) ? commRate : computeRate;
    };
    double step = kUnknown;
    for (unsigned s = 0; s < numStreams; ++s)
      if (running[s] >= 0)
        step = std::min(step, left[running[s]] / rateOf(s));
    if (step == kUnknown)
      return false; // nothing runs and nothing can start
    now += step;
    for (unsigned s = 0; s < numStreams; ++s) {
      int t = running[s];
      if (t < 0)
        continue;
      double rate = rateOf(s);
      left[t] -= step * rate;
      // The task that set the step ends exactly now; others within
      // rounding of it too.
      if (left[t] <= 1e-9 * std::max(1.0, tasks[t].durationUs)) {
        tasks[t].endUs = now;
        done[t] = true;
        running[s] = -1;
        ++finished;
      }
    }
  }
  return true;
}

bool mlir::moe::listSchedule(std::vector<QueuedTask> &tasks) {
  // Queues in order of first appearance: ties between streams go to the
  // queue seen first.
  unsigned numStreams;
  std::vector<Queue> queues = makeQueues(tasks, numStreams);

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

bool mlir::moe::coupledSchedule(const std::vector<QueuedTask> &tasks,
                                CoupledRanks &ranks,
                                const std::vector<bool> &commStream,
                                double commCpuShare, double commStretch,
                                double commStretchPartial,
                                const std::vector<bool> &hostStream) {
  unsigned numStreams;
  std::vector<Queue> queues = makeQueues(tasks, numStreams);
  size_t numRanks = ranks.durationUs.size(), numTasks = tasks.size();
  auto isComm = [&](unsigned s) { return s < commStream.size() && commStream[s]; };
  auto isHost = [&](unsigned s) { return s < hostStream.size() && hostStream[s]; };

  // The ranks that run collective t with rank r (r alone for a task
  // without group keys).
  std::vector<std::vector<std::vector<unsigned>>> members(numTasks);
  for (size_t t = 0; t < numTasks; ++t) {
    if (ranks.groupKey.size() <= t || ranks.groupKey[t].empty())
      continue;
    members[t].resize(numRanks);
    for (unsigned r = 0; r < numRanks; ++r)
      for (unsigned m = 0; m < numRanks; ++m)
        if (ranks.groupKey[t][m] == ranks.groupKey[t][r])
          members[t][r].push_back(m);
  }
  auto membersOf = [&](size_t t, unsigned r) -> std::vector<unsigned> {
    return members[t].empty() ? std::vector<unsigned>{r} : members[t][r];
  };

  std::vector<std::vector<char>> done(numRanks, std::vector<char>(numTasks)),
      posted = done;
  std::vector<std::vector<double>> left = ranks.durationUs;
  std::vector<std::vector<size_t>> next(numRanks,
                                        std::vector<size_t>(queues.size()));
  // running[r][s][slot]: slot 1 holds a communication stream's
  // low-priority task (the pool's second flight slot).
  std::vector<std::vector<std::array<int, 2>>> running(
      numRanks, std::vector<std::array<int, 2>>(numStreams, {-1, -1}));
  ranks.startUs.assign(numRanks, std::vector<double>(numTasks, 0.0));
  ranks.endUs = ranks.startUs;

  // The head of queue qi on rank r if it can start (its predecessor in the
  // queue and the tasks it waits for are done), else -1.
  auto head = [&](unsigned r, size_t qi) -> int {
    const Queue &q = queues[qi];
    size_t n = next[r][qi];
    if (n >= q.tasks.size() || (n > 0 && !done[r][q.tasks[n - 1]]))
      return -1;
    for (unsigned producer : tasks[q.tasks[n]].deps)
      if (!done[r][producer])
        return -1;
    return q.tasks[n];
  };
  double now = 0;
  auto start = [&](unsigned r, size_t qi, unsigned s, int slot) {
    unsigned t = queues[qi].tasks[next[r][qi]++];
    ranks.startUs[r][t] = now;
    posted[r][t] = 1;
    running[r][s][slot] = t;
  };
  auto active = [&](unsigned r, unsigned t) {
    for (unsigned m : membersOf(t, r))
      if (!posted[m][t])
        return false;
    return true;
  };

  for (size_t finished = 0; finished < numRanks * numTasks;) {
    for (unsigned r = 0; r < numRanks; ++r)
      for (unsigned s = 0; s < numStreams; ++s) {
        if (running[r][s][0] >= 0)
          continue;
        int high = -1, low = -1;
        for (size_t qi = 0; qi < queues.size(); ++qi)
          if (queues[qi].stream == s && head(r, qi) >= 0)
            (queues[qi].low ? low : high) = qi;
        if (high >= 0)
          start(r, high, s, 0);
        else if (low >= 0 && !isComm(s))
          start(r, low, s, 0);
        else if (low >= 0 && running[r][s][1] < 0)
          start(r, low, s, 1); // the pool's low slot: no all-to-all runs
      }

    // Rates until the next task ends.
    std::vector<char> computing(numRanks, 0);
    std::vector<int> collectives(numRanks, 0);
    std::vector<std::vector<int>> onStream(numRanks,
                                           std::vector<int>(numStreams, 0));
    for (unsigned r = 0; r < numRanks; ++r)
      for (unsigned s = 0; s < numStreams; ++s)
        for (int t : running[r][s]) {
          if (t < 0)
            continue;
          if (!isComm(s)) {
            computing[r] |= !isHost(s);
          } else if (active(r, t)) {
            ++collectives[r];
            ++onStream[r][s];
          }
        }
    auto rateOf = [&](unsigned r, unsigned s, unsigned t) {
      if (isHost(s))
        return 1.0;
      if (!isComm(s))
        return 1 - std::min(0.95, commCpuShare * collectives[r]);
      if (!active(r, t))
        return 0.0; // posted, waiting for a rank of its group
      std::vector<unsigned> group = membersOf(t, r);
      size_t busy = 0;
      int sharing = 1;
      for (unsigned m : group) {
        busy += computing[m] != 0;
        sharing = std::max(sharing, onStream[m][s]);
      }
      double stretch = busy == 0              ? 1.0
                       : busy == group.size() ? commStretch
                                              : commStretchPartial;
      return 1 / stretch / sharing;
    };
    double step = kUnknown;
    for (unsigned r = 0; r < numRanks; ++r)
      for (unsigned s = 0; s < numStreams; ++s)
        for (int t : running[r][s])
          if (t >= 0) {
            double rate = rateOf(r, s, t);
            if (rate > 0)
              step = std::min(step, left[r][t] / rate);
          }
    if (step == kUnknown)
      return false; // nothing progresses and nothing can start
    now += step;
    for (unsigned r = 0; r < numRanks; ++r)
      for (unsigned s = 0; s < numStreams; ++s)
        for (int &t : running[r][s]) {
          if (t < 0)
            continue;
          double rate = rateOf(r, s, t);
          if (rate <= 0)
            continue;
          left[r][t] -= step * rate;
          if (left[r][t] <= 1e-9 * std::max(1.0, ranks.durationUs[r][t])) {
            ranks.endUs[r][t] = now;
            done[r][t] = 1;
            t = -1;
            ++finished;
          }
        }
  }
  return true;
}
