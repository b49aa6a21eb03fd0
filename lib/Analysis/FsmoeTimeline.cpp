//===- FsmoeTimeline.cpp - FSMoE and its baselines as timelines -----------===//
//
// Tasks are appended in issue order; ListScheduler keeps one in-order
// queue per stream, so the order of appends on a stream is its FIFO order.
// A gradient slice is one all-reduce task on the inter-node stream at its
// window's position; it depends on the task that produced the last byte
// it reduces (slices cut one flat gradient buffer in backward order).
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/FsmoeTimeline.h"
#include "moe/Analysis/ListScheduler.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cassert>
#include <limits>

using namespace mlir::moe;

const char *mlir::moe::scheduleName(LayerSchedule schedule) {
  switch (schedule) {
  case LayerSchedule::DeepSpeedMoE:
    return "deepspeed-moe";
  case LayerSchedule::Tutel:
    return "tutel";
  case LayerSchedule::TutelImproved:
    return "tutel-improved";
  case LayerSchedule::FsmoeNoIIo:
    return "fsmoe-no-iio";
  case LayerSchedule::Fsmoe:
    return "fsmoe";
  }
  return "?";
}

namespace {

constexpr unsigned kCompute = 0, kInter = 1, kIntra = 2;
constexpr unsigned kNone = std::numeric_limits<unsigned>::max();

/// Tasks in issue order, with what the trace shows of them.
class TimelineBuilder {
public:
  /// Without IIo the MoE layer's intra-node collectives queue on the
  /// inter-node stream.
  explicit TimelineBuilder(bool overlapIntraInter)
      : espStream(overlapIntraInter ? kIntra : kInter) {}

  unsigned add(unsigned stream, double us, std::initializer_list<unsigned> deps,
               std::string label, Link link = Link::None) {
    QueuedTask q;
    q.stream = stream;
    q.durationUs = us;
    for (unsigned d : deps)
      if (d != kNone)
        q.deps.push_back(d);
    queued.push_back(std::move(q));
    SimulatedTask t;
    t.label = std::move(label);
    t.stream = stream;
    t.communication = stream != kCompute;
    t.cost.us = us;
    t.cost.link = link;
    tasks.push_back(std::move(t));
    return tasks.size() - 1;
  }
  unsigned compute(double us, unsigned dep, std::string label) {
    return add(kCompute, us, {dep}, std::move(label));
  }
  unsigned inter(double us, std::initializer_list<unsigned> deps,
                 std::string label) {
    return add(kInter, us, deps, std::move(label), Link::Inter);
  }
  /// The dense parts' model-parallel collectives.
  unsigned intraLink(double us, unsigned dep, std::string label) {
    return add(kIntra, us, {dep}, std::move(label), Link::Intra);
  }
  /// The MoE layer's expert-sharding collectives.
  unsigned esp(double us, unsigned dep, std::string label) {
    return add(espStream, us, {dep}, std::move(label), Link::Intra);
  }
  void dependOn(unsigned task, unsigned dep) {
    if (dep != kNone)
      queued[task].deps.push_back(dep);
  }

  /// Runs the list scheduler; fills start and end times.
  void run() {
    bool ok = listSchedule(queued);
    assert(ok && "a step timeline always progresses");
    (void)ok;
    for (size_t i = 0; i < tasks.size(); ++i) {
      tasks[i].startUs = queued[i].startUs;
      tasks[i].endUs = queued[i].endUs;
    }
  }

  unsigned espStream;
  std::vector<QueuedTask> queued;
  std::vector<SimulatedTask> tasks;
};

std::string label(const char *name, bool backward, int64_t chunk,
                  int64_t layer) {
  return llvm::formatv("{0}{1}{2}^{3}", name, backward ? "'" : "",
                       chunk > 0 ? llvm::formatv("_{0}", chunk).str() : "",
                       layer)
      .str();
}

struct PhaseTasks {
  std::vector<unsigned> dispatch, gather, expert, scatter, combine;
  unsigned slice = kNone;
};

/// One MoE phase in FSMoE's FIFO issue order; `input` is the task whose
/// output is dispatched. A slice of `sliceUs` > 0 goes after the last
/// dispatch and waits for `sliceDep`.
PhaseTasks emitMoePhase(TimelineBuilder &b, const MoePhaseCosts &c, int64_t r,
                        unsigned input, double sliceUs, unsigned sliceDep,
                        bool backward, int64_t layer) {
  PhaseTasks p;
  double rr = double(r);
  for (int64_t i = 1; i <= r; ++i) {
    p.dispatch.push_back(b.inter(c.allToAll.chunk(rr), {input},
                                 label("D", backward, i, layer)));
    p.gather.push_back(b.esp(c.allGather.chunk(rr), p.dispatch.back(),
                                   label("AG", backward, i, layer)));
  }
  if (sliceUs > 0)
    p.slice = b.inter(sliceUs, {sliceDep},
                      label("GAR", false, 0, layer) + "(moe)");
  for (int64_t i = 1; i <= r; ++i) {
    p.expert.push_back(b.compute(c.expert.chunk(rr), p.gather[i - 1],
                                 label("E", backward, i, layer)));
    p.scatter.push_back(b.esp(c.reduceScatter.chunk(rr),
                                    p.expert.back(),
                                    label("RS", backward, i, layer)));
  }
  for (int64_t i = 1; i <= r; ++i)
    p.combine.push_back(b.inter(c.allToAll.chunk(rr), {p.scatter[i - 1]},
                                label("C", backward, i, layer)));
  return p;
}

/// The window kinds of one layer's backward pass, in order.
enum class WindowKind { BeforeMoe, Moe, AfterMoe, Embedding, End };

struct WindowSlot {
  WindowKind kind;
  int64_t layer;
};

std::vector<WindowSlot> windowSlots(const FsmoeStack &s) {
  std::vector<WindowSlot> slots;
  for (int64_t l = s.layers; l >= 1; --l) {
    slots.push_back({WindowKind::BeforeMoe, l});
    slots.push_back({WindowKind::Moe, l});
    slots.push_back({WindowKind::AfterMoe, l});
  }
  if (s.embeddingBackwardUs > 0)
    slots.push_back({WindowKind::Embedding, 1});
  slots.push_back({WindowKind::End, 0});
  return slots;
}

} // namespace

std::vector<GradientWindow> mlir::moe::backwardWindows(const FsmoeStack &s) {
  const FsmoeLayerCosts &c = s.layer;
  const double f = c.backwardFactor;
  std::vector<GradientWindow> windows;
  for (const WindowSlot &slot : windowSlots(s)) {
    GradientWindow w;
    switch (slot.kind) {
    case WindowKind::BeforeMoe:
      // The gradient of the layer above (or the one handed over) is ready.
      w.readyBytes = slot.layer < s.layers || s.steadyState ? c.gradientBytes
                                                            : 0.0;
      w.denseUs = c.mpAllGatherUs + c.inverseOrderUs * f +
                  (slot.layer == s.layers ? s.headUs * f : 0.0);
      break;
    case WindowKind::Moe:
      w.moe = c.backward;
      break;
    case WindowKind::AfterMoe:
      w.denseUs =
          (c.orderUs + c.gateUs + c.attentionUs) * f + c.mpReduceScatterUs;
      break;
    case WindowKind::Embedding:
      w.readyBytes = c.gradientBytes;
      w.denseUs = s.embeddingBackwardUs;
      break;
    case WindowKind::End:
      // Produced at the very end: the first layer's gradient (or, with an
      // embedding, the tied head's), reduced after the backward pass --
      // unless a steady state hands it to the next layer.
      w.readyBytes = s.embeddingBackwardUs > 0 ? s.headGradientBytes
                     : s.steadyState          ? 0.0
                                              : c.gradientBytes;
      break;
    }
    windows.push_back(w);
  }
  return windows;
}

double mlir::moe::simulateMoePhase(const MoePhaseCosts &costs, int64_t degree,
                                   double tGarUs, bool overlapIntraInter) {
  TimelineBuilder b(overlapIntraInter);
  emitMoePhase(b, costs, degree, kNone, tGarUs, kNone, false, 1);
  b.run();
  double end = 0;
  for (const SimulatedTask &t : b.tasks)
    end = std::max(end, t.endUs);
  return end;
}

namespace {

/// The link's slack after the last dispatch-side task of a phase without a
/// slice: how long a slice there delays nothing (one link: between the
/// last all-gather and the first reduce-scatter).
double sharedLinkSlack(const MoePhaseCosts &costs, int64_t degree) {
  TimelineBuilder b(false);
  PhaseTasks p = emitMoePhase(b, costs, degree, kNone, 0, kNone, false, 1);
  b.run();
  return std::max(0.0, b.tasks[p.scatter.front()].startUs -
                           b.tasks[p.gather.back()].endUs);
}

/// The degree with the fastest one-link phase for a slice of tGarUs.
DegreeChoice sharedLinkDegree(const MoePhaseCosts &costs, double tGarUs,
                              const DegreeOptions &options) {
  DegreeChoice best;
  best.timeUs = std::numeric_limits<double>::infinity();
  for (int64_t r : options.degrees) {
    double t = simulateMoePhase(costs, r, tGarUs, false);
    if (t < best.timeUs)
      best = {r, t, PipelineCase::ExpertBound};
  }
  return best;
}

} // namespace

namespace {

/// The flat gradient buffer in backward order: which task produced which
/// bytes, and how far the slices have taken from it.
class GradientBuffer {
public:
  void produce(double bytes, unsigned producer) {
    if (bytes <= 0)
      return;
    produced += bytes;
    producers.push_back({produced, producer});
  }
  /// Takes a slice's bytes; returns the producer of its last byte
  /// (`fallback` if none: only an acausal plan takes bytes not produced).
  unsigned take(double bytes, unsigned fallback) {
    taken += bytes;
    auto it = std::lower_bound(
        producers.begin(), producers.end(), taken * (1 - 1e-12),
        [](const auto &e, double v) { return e.first < v; });
    return it == producers.end() ? fallback : it->second;
  }
  double produced = 0, taken = 0;

private:
  std::vector<std::pair<double, unsigned>> producers; // (cumulative, task)
};

/// Appends a step's tasks in issue order; windows are visited in
/// backwardWindows order.
class StepEmitter {
public:
  StepEmitter(const FsmoeStack &s, const StepPlan &plan)
      : s(s), c(s.layer), plan(plan), b(plan.overlapIntraInter),
        slices(plan.sliceBytes) {
    slices.resize(backwardWindows(s).size(), 0.0);
  }

  void forwardLayer(int64_t l) {
    unsigned att = b.compute(c.attentionUs, prev, label("ATT", false, 0, l));
    unsigned mprs =
        b.intraLink(c.mpReduceScatterUs, att, label("MPRS", false, 0, l));
    unsigned gate = b.compute(c.gateUs, mprs, label("G", false, 0, l));
    unsigned order = b.compute(c.orderUs, gate, label("O", false, 0, l));
    PhaseTasks p = emitMoePhase(b, c.forward, plan.forwardDegree[l - 1],
                                order, 0, kNone, false, l);
    unsigned inverse = b.compute(c.inverseOrderUs, p.combine.back(),
                                 label("IO", false, 0, l));
    prev = b.intraLink(c.mpAllGatherUs, inverse, label("MPAG", false, 0, l));
  }

  void endForward() {
    if (s.headUs > 0)
      prev = b.compute(s.headUs, prev, "HEAD");
    forwardEnd = prev;
    if (s.headUs > 0)
      prev = b.compute(s.headUs * c.backwardFactor, prev, "HEAD'");
  }

  /// The windows before, in and after layer l's MoE; the layer above's
  /// gradient (or the one handed in) is ready before the first.
  void backwardLayer(int64_t l) {
    const double f = c.backwardFactor;
    if (l < s.layers)
      grads.produce(c.gradientBytes, prev);
    else if (s.steadyState)
      grads.produce(c.gradientBytes, forwardEnd);
    std::string at = llvm::formatv("{0}", l).str();
    slice("pre^" + at);
    unsigned mpag =
        b.intraLink(c.mpAllGatherUs, prev, label("MPAG", true, 0, l));
    unsigned inverse =
        b.compute(c.inverseOrderUs * f, mpag, label("IO", true, 0, l));
    // The MoE layer's slice is issued after its last dispatch.
    double bytes = slices[window++];
    unsigned dep = bytes > 0 ? grads.take(bytes, forwardEnd) : kNone;
    PhaseTasks p = emitMoePhase(
        b, c.backward, plan.backwardDegree[l - 1], inverse,
        bytes > 0 ? c.gradientAllReduce(bytes) : 0.0, dep, true, l);
    if (p.slice != kNone)
      b.tasks[p.slice].cost.bytes = bytes;
    slice("post^" + at);
    unsigned order =
        b.compute(c.orderUs * f, p.combine.back(), label("O", true, 0, l));
    unsigned gate = b.compute(c.gateUs * f, order, label("G", true, 0, l));
    unsigned mprs =
        b.intraLink(c.mpReduceScatterUs, gate, label("MPRS", true, 0, l));
    prev = b.compute(c.attentionUs * f, mprs, label("ATT", true, 0, l));
  }

  /// The embedding's backward, the rest of the gradient after the
  /// backward pass, the update.
  SimulationResult finish() {
    unsigned lastProducer = prev;
    if (s.embeddingBackwardUs > 0) {
      grads.produce(c.gradientBytes, prev);
      prev = b.compute(s.embeddingBackwardUs, prev, "EMB'");
      slice("emb");
      lastProducer = prev;
      grads.produce(s.headGradientBytes, prev);
    } else if (!s.steadyState) {
      grads.produce(c.gradientBytes, prev);
    }
    double tail = grads.produced - grads.taken;
    unsigned last = prev;
    if (tail > 1e-9 * grads.produced) {
      last = b.inter(c.gradientAllReduce(tail), {lastProducer, prev},
                     "GAR(tail)");
      b.tasks[last].cost.bytes = tail;
    }
    if (s.optimizerUs > 0) {
      unsigned opt = b.compute(s.optimizerUs, prev, "OPT");
      b.dependOn(opt, last);
    }
    b.run();
    SimulationResult result;
    result.tasks = std::move(b.tasks);
    summarizeTimeline(result, {"compute", "comm", "comm1"},
                      {false, true, true});
    return result;
  }

private:
  /// The next window's slice, at its place in the inter-node queue.
  void slice(const std::string &name) {
    double bytes = slices[window++];
    if (bytes <= 0)
      return;
    unsigned dep = grads.take(bytes, forwardEnd);
    unsigned task =
        b.inter(c.gradientAllReduce(bytes), {dep}, "GAR(" + name + ")");
    b.tasks[task].cost.bytes = bytes;
  }

  const FsmoeStack &s;
  const FsmoeLayerCosts &c;
  const StepPlan &plan;
  TimelineBuilder b;
  std::vector<double> slices;
  GradientBuffer grads;
  size_t window = 0;
  unsigned prev = kNone, forwardEnd = kNone;
};

} // namespace

SimulationResult mlir::moe::simulateStep(const FsmoeStack &s,
                                         const StepPlan &plan) {
  assert(int64_t(plan.forwardDegree.size()) == s.layers &&
         int64_t(plan.backwardDegree.size()) == s.layers);
  assert(isCausalPartition(backwardWindows(s), plan.sliceBytes,
                           1e-6 * s.layer.gradientBytes) &&
         "a plan reduces no gradient before it exists");
  StepEmitter e(s, plan);
  for (int64_t l = 1; l <= s.layers; ++l)
    e.forwardLayer(l);
  e.endForward();
  for (int64_t l = s.layers; l >= 1; --l)
    e.backwardLayer(l);
  return e.finish();
}

namespace {

StepPlan uniform(const FsmoeStack &s, LayerSchedule schedule, int64_t r,
                 bool overlapIntraInter) {
  StepPlan plan;
  plan.schedule = schedule;
  plan.forwardDegree.assign(s.layers, r);
  plan.backwardDegree.assign(s.layers, r);
  plan.overlapIntraInter = overlapIntraInter;
  return plan;
}

/// Tutel's degree: the one whose whole step is fastest (its runtime tries
/// them), the same in both phases.
StepPlan fastestUniform(const FsmoeStack &s, LayerSchedule schedule,
                        const DegreeOptions &degrees,
                        const std::vector<double> &slices) {
  StepPlan best;
  double bestUs = std::numeric_limits<double>::infinity();
  for (int64_t r : degrees.degrees) {
    StepPlan plan = uniform(s, schedule, r, false);
    plan.sliceBytes = slices;
    double us = simulateStep(s, plan).iterationUs;
    if (us < bestUs) {
      bestUs = us;
      best = plan;
    }
  }
  return best;
}

} // namespace

StepPlan mlir::moe::planStep(const FsmoeStack &s, LayerSchedule schedule,
                             const PlanOptions &options) {
  switch (schedule) {
  case LayerSchedule::DeepSpeedMoE:
    return uniform(s, schedule, 1, false);
  case LayerSchedule::Tutel:
    return fastestUniform(s, schedule, options.degrees, {});
  case LayerSchedule::TutelImproved: {
    // The gradient all-reduce beside the dense parts only: step 1 of the
    // partition with the MoE layers closed.
    std::vector<GradientWindow> windows = backwardWindows(s);
    for (GradientWindow &w : windows)
      w.moe.reset();
    PartitionOptions greedy;
    greedy.differentialEvolution = false;
    GradientPlan g = partitionGradients(windows, s.layer.gradientAllReduce,
                                        greedy);
    std::vector<double> slices;
    for (const WindowPlan &p : g.windows)
      slices.push_back(p.bytes);
    StepPlan plan = fastestUniform(s, schedule, options.degrees, slices);
    plan.gradients = g;
    return plan;
  }
  case LayerSchedule::FsmoeNoIIo:
  case LayerSchedule::Fsmoe:
    break;
  }
  const bool iio = schedule == LayerSchedule::Fsmoe;
  PartitionOptions partition;
  partition.degrees = options.degrees;
  partition.differentialEvolution = options.differentialEvolution;
  partition.evolution = options.evolution;
  // FSMoE's code (tools/optim.py) fixes only the forward degree (d0) at 1
  // for a small all-to-all; the backward degree of a layer it gives a
  // gradient slice is Algorithm 1's for that slice (it forces only d1, the
  // degree it reports for the layer it plans without one).
  const bool smallForward = options.smallAllToAllRule &&
                            s.layer.forward.allToAll.whole() < 1000.0;
  if (!iio) {
    // Without the overlap Algorithm 1's cases do not apply: the same
    // decisions, taken on the one-link timeline.
    partition.moeLayer = [&](const MoePhaseCosts &c, double tGar) {
      return sharedLinkDegree(c, tGar, partition.degrees);
    };
    partition.overlapWindow = sharedLinkSlack;
  }
  DegreeChoice forward =
      iio ? findOptimalPipelineDegree(s.layer.forward, 0, partition.degrees)
          : sharedLinkDegree(s.layer.forward, 0, partition.degrees);
  StepPlan plan =
      uniform(s, schedule, smallForward ? 1 : forward.degree, iio);
  plan.gradients = partitionGradients(backwardWindows(s),
                                      s.layer.gradientAllReduce, partition);
  std::vector<WindowSlot> slots = windowSlots(s);
  for (size_t j = 0; j < slots.size(); ++j) {
    plan.sliceBytes.push_back(plan.gradients.windows[j].bytes);
    if (slots[j].kind == WindowKind::Moe)
      plan.backwardDegree[slots[j].layer - 1] =
          plan.gradients.windows[j].degree;
  }
  return plan;
}
