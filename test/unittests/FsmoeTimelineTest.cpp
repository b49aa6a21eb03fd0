//===- FsmoeTimelineTest.cpp - FSMoE layer model and timelines ------------===//
//
// The layer model against FSMoE's volumes and the paper's fitted lines;
// the FIFO timelines against hand-computed schedules and against Algorithm
// 1's case times; the plans of each schedule; causality of the gradient
// slices on the timeline.
//
//===----------------------------------------------------------------------===//

#include "moe/Analysis/FsmoeTimeline.h"

#include <gtest/gtest.h>

using namespace mlir::moe;

namespace {

const MoePhaseCosts kA2aBound{{1, 16}, {1, 4}, {1, 4}, {0.5, 2}};
const MoePhaseCosts kIntraBound{{1, 4}, {1, 16}, {1, 16}, {0.5, 2}};
const MoePhaseCosts kExpertBound{{1, 4}, {1, 2}, {1, 2}, {2, 32}};

HardwareProfile preset(const char *name) {
  llvm::Expected<HardwareProfile> p = HardwareProfile::load(name);
  if (!p) {
    ADD_FAILURE() << llvm::toString(p.takeError());
    return {};
  }
  return *p;
}

TEST(FsmoeTimeline, MoePhaseByHand) {
  // r = 2, two links. kA2aBound: D1 [0,9] D2 [9,18], AG1 [9,12] AG2
  // [18,21], E1 [12,13.5] E2 [21,22.5], RS1 behind AG2 [21,24] RS2
  // [24,27], C1 [24,33] C2 [33,42]: Case 3's 2r t_a2a + t_ag + t_rs.
  EXPECT_DOUBLE_EQ(simulateMoePhase(kA2aBound, 2, 0, true), 42);
  // AG1 [3,12] AG2 [12,21], RS1 [21,30] RS2 [30,39], C2 [39,42]: Case 4.
  EXPECT_DOUBLE_EQ(simulateMoePhase(kIntraBound, 2, 0, true), 42);
  // E1 [5,23] E2 [23,41], RS2 [41,43], C2 [43,46]: Case 2.
  EXPECT_DOUBLE_EQ(simulateMoePhase(kExpertBound, 2, 0, true), 46);
  // A 10 us slice after D2: [18,28], C1 [28,37], C2 [37,46]: Case 1.
  EXPECT_DOUBLE_EQ(simulateMoePhase(kA2aBound, 2, 10, true), 46);
  // One link: D1 AG1 D2 AG2 RS1 RS2 C1 C2 back to back, 2*9+3+9+3+3+3+9+9.
  EXPECT_DOUBLE_EQ(simulateMoePhase(kA2aBound, 2, 0, false), 48);
}

TEST(FsmoeTimeline, PhaseTimelineIsAlgorithm1OnTheTestbeds) {
  // On every layer of a grid over Table 4's ranges, the FIFO timeline of
  // the degree Algorithm 1 picks takes what its case formula says.
  for (const char *name : {"fsmoe-testbed-a", "fsmoe-testbed-b"}) {
    HardwareProfile p = preset(name);
    for (int64_t b : {1, 4})
      for (int64_t seq : {512, 2048})
        for (int64_t m : {1024, 4096})
          for (int64_t gemms : {2, 3}) {
            FsmoeLayerShape s;
            s.batch = b;
            s.seq = seq;
            s.embed = m;
            s.hidden = 3 * m;
            s.experts = p.nodes;
            s.expertGemms = gemms;
            FsmoeLayerCosts c = fsmoeLayerCosts(s, p);
            for (const MoePhaseCosts &phase : {c.forward, c.backward}) {
              DegreeChoice d = findOptimalPipelineDegree(phase, 0);
              EXPECT_NEAR(simulateMoePhase(phase, d.degree, 0, true),
                          d.timeUs, 1e-3 * d.timeUs)
                  << name << " B" << b << " L" << seq << " M" << m;
            }
          }
  }
}

/// A Testbed B layer: B 2, L 512, M 2048, H 6144, 16 heads, E 8, k 2,
/// f 1.2.
FsmoeLayerShape testbedBLayer() {
  FsmoeLayerShape s;
  s.batch = 2;
  s.seq = 512;
  s.embed = 2048;
  s.hidden = 6144;
  s.heads = 16;
  s.kvHeads = 16;
  s.experts = 8;
  s.topK = 2;
  s.capacityFactor = 1.2;
  return s;
}

TEST(FsmoeLayerModel, VolumesAndTimesFollowThePaper) {
  HardwareProfile p = preset("fsmoe-testbed-b"); // 8 nodes x 4 GPUs
  FsmoeLayerCosts c = fsmoeLayerCosts(testbedBLayer(), p);
  // 256 tokens per rank after the MP reduce-scatter; C = ceil(2.4*256/8).
  EXPECT_EQ(c.capacity, 77);
  const double slots = 8 * 77; // k f B L / N_ESP, rounded up per expert
  EXPECT_DOUBLE_EQ(c.a2aBytes, slots * 2048 * 4);
  EXPECT_DOUBLE_EQ(c.agBytes, 4 * slots * 2048 * 4);
  EXPECT_DOUBLE_EQ(c.expertFlops, 2 * 4 * slots * 2048 * (6144 / 4) * 2);
  // The paper's fitted lines (Fig. 5d, ms per fp32 element) on n_x.
  EXPECT_NEAR(c.forward.allToAll.whole(),
              1e3 * (1.75e-1 + 3.06e-7 * slots * 2048), 1e-3);
  EXPECT_NEAR(c.forward.allGather.whole(),
              1e3 * (3.20e-2 + 1.68e-7 * 4 * slots * 2048), 1e-3);
  EXPECT_NEAR(c.forward.reduceScatter.whole(),
              1e3 * (3.91e-2 + 1.67e-7 * 4 * slots * 2048), 1e-3);
  EXPECT_NEAR(c.forward.expert.whole(),
              1e3 * (9.24e-2 + 4.42e-11 * c.expertFlops / 2), 1e-3);
  EXPECT_DOUBLE_EQ(c.backward.expert.workUs, 2 * c.forward.expert.workUs);
  // FSMoE's code: 3M^2/N_MP + 3M/N_MP + M^2/N_MP + M, plus the gate (M E)
  // and two norms' gains and biases (4M).
  const double m = 2048;
  EXPECT_DOUBLE_EQ(c.gradientBytes,
                   4 * (4 * m * m / 4 + 3 * m / 4 + m + 8 * m + 4 * m));
  EXPECT_NEAR(c.gradientAllReduce(c.gradientBytes),
              1e3 * (8.37e-2 + 5.99e-7 * c.gradientBytes / 4), 1e-3);
}

TEST(FsmoeLayerModel, SharedNicScalesOnlyTheInterNodeBandwidth) {
  // The sensitivity reading: the node's 4 ranks send through one NIC at
  // once, so the all-to-all's and the gradient all-reduce's bandwidth
  // terms are 4x the fit's; start-ups and intra-node collectives stay.
  HardwareProfile p = preset("fsmoe-testbed-b");
  FsmoeLayerShape s = testbedBLayer();
  FsmoeLayerCosts alone = fsmoeLayerCosts(s, p);
  s.sharedNic = true;
  FsmoeLayerCosts shared = fsmoeLayerCosts(s, p);
  EXPECT_DOUBLE_EQ(shared.forward.allToAll.workUs,
                   4 * alone.forward.allToAll.workUs);
  EXPECT_DOUBLE_EQ(shared.backward.allToAll.workUs,
                   4 * alone.backward.allToAll.workUs);
  EXPECT_DOUBLE_EQ(shared.forward.allToAll.alphaUs,
                   alone.forward.allToAll.alphaUs);
  EXPECT_DOUBLE_EQ(shared.gradientAllReduce.betaUsPerByte,
                   4 * alone.gradientAllReduce.betaUsPerByte);
  EXPECT_DOUBLE_EQ(shared.gradientAllReduce.alphaUs,
                   alone.gradientAllReduce.alphaUs);
  EXPECT_DOUBLE_EQ(shared.forward.allGather.workUs,
                   alone.forward.allGather.workUs);
  EXPECT_DOUBLE_EQ(shared.mpReduceScatterUs, alone.mpReduceScatterUs);
}

TEST(FsmoeLayerModel, RejectsShapesTheLayoutCannotHold) {
  HardwareProfile p = preset("fsmoe-testbed-b");
  FsmoeLayerShape s;
  s.experts = 6;
  EXPECT_NE(checkFsmoeLayer(s, p).find("multiple of the nodes"),
            std::string::npos);
  s.experts = 8;
  s.batch = 1;
  s.seq = 3;
  EXPECT_NE(checkFsmoeLayer(s, p).find("GPUs per node"), std::string::npos);
  s.seq = 256;
  EXPECT_EQ(checkFsmoeLayer(s, p), "");
}

FsmoeStack stack(const HardwareProfile &p, int64_t layers, bool steady) {
  FsmoeLayerShape s;
  s.batch = 2;
  s.seq = 512;
  s.embed = 2048;
  s.hidden = 8192;
  s.experts = p.nodes;
  FsmoeStack st;
  st.layer = fsmoeLayerCosts(s, p);
  st.layers = layers;
  st.steadyState = steady;
  return st;
}

TEST(FsmoeTimeline, PlansOfEachSchedule) {
  HardwareProfile p = preset("fsmoe-testbed-a");
  FsmoeStack st = stack(p, 3, false);
  StepPlan ds = planStep(st, LayerSchedule::DeepSpeedMoE);
  EXPECT_EQ(ds.forwardDegree, std::vector<int64_t>(3, 1));
  EXPECT_FALSE(ds.overlapIntraInter);

  // Tutel's degree is the uniform one whose step is fastest.
  StepPlan tutel = planStep(st, LayerSchedule::Tutel);
  double tutelUs = simulateStep(st, tutel).iterationUs;
  for (int64_t r : {1, 2, 4, 8}) {
    StepPlan other = tutel;
    other.forwardDegree.assign(3, r);
    other.backwardDegree.assign(3, r);
    EXPECT_LE(tutelUs, simulateStep(st, other).iterationUs) << r;
  }
  EXPECT_EQ(tutel.forwardDegree, tutel.backwardDegree);

  StepPlan fs = planStep(st, LayerSchedule::Fsmoe);
  EXPECT_TRUE(fs.overlapIntraInter);
  EXPECT_EQ(fs.forwardDegree[0],
            findOptimalPipelineDegree(st.layer.forward, 0).degree);
  // The backward degree of each layer is Algorithm 1's for its slice.
  std::vector<GradientWindow> windows = backwardWindows(st);
  for (size_t j = 0; j < windows.size(); ++j)
    if (windows[j].moe) {
      const WindowPlan &w = fs.gradients.windows[j];
      EXPECT_EQ(w.degree,
                findOptimalPipelineDegree(st.layer.backward,
                                          st.layer.gradientAllReduce(w.bytes))
                    .degree);
    }
  EXPECT_TRUE(isCausalPartition(windows, fs.sliceBytes));
  StepPlan noIIo = planStep(st, LayerSchedule::FsmoeNoIIo);
  EXPECT_FALSE(noIIo.overlapIntraInter);

  // The three resources, as the trace names them.
  SimulationResult r = simulateStep(st, fs);
  EXPECT_EQ(r.streamNames,
            (std::vector<std::string>{"compute", "comm (inter-node)",
                                      "comm1 (intra-node)"}));
  EXPECT_GT(r.linkOverlapUs, 0);
  SimulationResult one = simulateStep(st, noIIo);
  EXPECT_EQ(one.streamNames[1], "comm (intra- and inter-node)");
}

TEST(FsmoeTimeline, NoSliceStartsBeforeItsGradientExists) {
  for (const char *name : {"fsmoe-testbed-a", "fsmoe-testbed-b"}) {
    HardwareProfile p = preset(name);
    FsmoeStack st = stack(p, 4, false);
    for (LayerSchedule s : {LayerSchedule::TutelImproved,
                            LayerSchedule::FsmoeNoIIo, LayerSchedule::Fsmoe}) {
      SimulationResult r = simulateStep(st, planStep(st, s));
      // Bytes produced by time t: one layer's gradient per finished
      // attention backward.
      auto producedBy = [&](double t) {
        double bytes = 0;
        for (const SimulatedTask &x : r.tasks)
          if (x.label.rfind("ATT'", 0) == 0 && x.endUs <= t + 1e-9)
            bytes += st.layer.gradientBytes;
        return bytes;
      };
      double reduced = 0, total = 0;
      std::vector<const SimulatedTask *> slices;
      for (const SimulatedTask &x : r.tasks)
        if (x.label.rfind("GAR", 0) == 0)
          slices.push_back(&x);
      std::sort(slices.begin(), slices.end(), [](auto *a, auto *b) {
        return a->startUs < b->startUs;
      });
      for (const SimulatedTask *x : slices) {
        reduced += x->cost.bytes;
        EXPECT_LE(reduced, producedBy(x->startUs) * (1 + 1e-9))
            << name << " " << scheduleName(s) << " " << x->label;
        total += x->cost.bytes;
      }
      // Every gradient is reduced once.
      EXPECT_NEAR(total, 4 * st.layer.gradientBytes,
                  1e-6 * st.layer.gradientBytes)
          << name << " " << scheduleName(s);
    }
  }
}

TEST(FsmoeTimeline, BackwardDegreeSeesTheModelParallelCollectives) {
  // FSMoE's planner sees MP's all-gather and reduce-scatter where its
  // model puts them: in the dense part's overlappable time (§5.2
  // t_olp,dense; tools/optim.py measure_others adds t_ag + t_rs of B L M
  // to the dense time), which decides how much gradient is left for the
  // MoE window and so Algorithm 1's t_gar and r_bwd. They are not terms of
  // Algorithm 1's cases: the MP reduce-scatter ends before the gate and
  // the MP all-gather starts after the inverse order, so neither shares
  // the MoE layer's window (docs/fsmoe-reproduction.md).
  //
  // One steady-state layer; its MoE (kA2aBound in both phases): with
  // slice t, r = 1 takes 46.5 (t <= 12.5) or 34 + t, r = 2 takes 42
  // (t <= 6) or 36 + t, r = 4 and 8 more; t_olp,moe at r = 2 is
  // t_ag + t_rs = 6. Attention 5 us forward (10 backward), no gate or
  // order; gradient 2500 B, t_ar(n) = 1 + 0.01 n.
  auto plan = [](double mpUs) {
    FsmoeStack st;
    st.layer.forward = kA2aBound;
    st.layer.backward = kA2aBound;
    st.layer.attentionUs = 5;
    st.layer.mpAllGatherUs = st.layer.mpReduceScatterUs = mpUs;
    st.layer.gradientBytes = 2500;
    st.layer.gradientAllReduce = {1, 0.01};
    st.steadyState = true;
    std::vector<GradientWindow> w = backwardWindows(st);
    EXPECT_DOUBLE_EQ(w[0].denseUs, mpUs);      // MP all-gather'
    EXPECT_DOUBLE_EQ(w[2].denseUs, 10 + mpUs); // attention' + MP RS'
    return planStep(st, LayerSchedule::Fsmoe);
  };
  // Without MP: 500 B beside the MoE, 900 beside the attention, 1100 left;
  // all 1600 in the MoE window (t = 17, r = 1: 51) beats the greedy
  // (r = 2: 42, + t_ar(1100) = 12 after the pass).
  StepPlan alone = plan(0);
  EXPECT_EQ(alone.backwardDegree, std::vector<int64_t>{1});
  EXPECT_NEAR(alone.sliceBytes[1], 1600, 1e-6);
  EXPECT_NEAR(alone.sliceBytes[2], 900, 1e-6);
  // MP's 5.5 us collectives: 450 B beside the all-gather', 500 beside the
  // MoE, 1450 beside attention' and reduce-scatter', 100 left; 600 in the
  // MoE window (t = 7, r = 2: 43) -- r = 1 would take 46.5.
  StepPlan mp = plan(5.5);
  EXPECT_EQ(mp.backwardDegree, std::vector<int64_t>{2});
  EXPECT_NEAR(mp.sliceBytes[0], 450, 1e-6);
  EXPECT_NEAR(mp.sliceBytes[1], 600, 1e-6);
  EXPECT_NEAR(mp.sliceBytes[2], 1450, 1e-6);
  EXPECT_NEAR(mp.gradients.predictedUs, 5.5 + 43 + 15.5, 1e-9);
}

TEST(FsmoeTimeline, SteadyStateHandsTheLastGradientOver) {
  HardwareProfile p = preset("fsmoe-testbed-b");
  FsmoeStack st = stack(p, 1, true);
  SimulationResult r = simulateStep(st, planStep(st, LayerSchedule::Tutel));
  // One gradient reduced (the one handed in), after the backward pass.
  double bytes = 0;
  for (const SimulatedTask &x : r.tasks)
    if (x.label.rfind("GAR", 0) == 0)
      bytes += x.cost.bytes;
  EXPECT_DOUBLE_EQ(bytes, st.layer.gradientBytes);
}

} // namespace
