//===- DeviceRoutingTest.cpp - CUDA gate/routing/expert code on host ------===//
//
// The CUDA backend's gate, routing and expert ops (src/device/GateOps.h,
// RoutingOps.h, ExpertOps.h) run on the HostExecutor and are checked
// against the CPU backend: the CPU ops (moe_rt_gate, moe_rt_expert and
// their vjps) where they exist, the CPU kernels (kernels/Routing.h,
// ExpertChoice.h) for routing, whose ops need a group. Dispatch and combine
// run their phases for G simulated ranks around an in-memory all-to-all,
// in the order the CUDA entry points queue them.
//
//===----------------------------------------------------------------------===//

#include "CheckedExecutor.h"
#include "TestTensor.h"

#include "../src/device/ExpertOps.h"
#include "../src/device/GateOps.h"
#include "../src/device/RoutingOps.h"
#ifdef MOE_RT_HAVE_CUDA
#include "../src/cuda/CudaRoutingOps.h"
#endif

#include "kernels/Expert.h"
#include "kernels/ExpertChoice.h"
#include "kernels/Gates.h"
#include "kernels/Routing.h"
#include "moe_rt/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

using moe_rt_test::Tensor;
namespace dev = moe_rt::device;
namespace k = moe_rt::kernels;

using moe_rt_test::CheckedExecutor;

std::vector<float> randomVec(int64_t n, unsigned seed, float scale = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(rng);
  return v;
}

void fill(Tensor &t, const std::vector<float> &v) {
  ASSERT_EQ(int64_t(v.size()), t.n());
  std::copy(v.begin(), v.end(), t.f());
}

/// got ≈ want elementwise to fp32 rounding (the references sum in float
/// with OpenBLAS, the host executor's GEMM in double). Reports the first
/// mismatch only.
void expectClose(const float *got, const float *want, int64_t n,
                 const std::string &what, double tol = 2e-5) {
  for (int64_t i = 0; i < n; ++i)
    if (!(std::fabs(double(got[i]) - want[i]) <=
          tol * (1 + std::fabs(double(want[i]))))) {
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", expected "
                    << want[i];
      return;
    }
}

void expectEqual(const int64_t *got, const int64_t *want, int64_t n,
                 const std::string &what) {
  for (int64_t i = 0; i < n; ++i)
    if (got[i] != want[i]) {
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", expected "
                    << want[i];
      return;
    }
}

/// Some output must be non-trivial, or a test comparing zeros to zeros
/// would pass whatever the op did.
double maxAbs(const float *p, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i)
    m = std::max(m, std::fabs(double(p[i])));
  return m;
}

struct CpuStream {
  moe_rt_stream s = nullptr;
  CpuStream() { EXPECT_EQ(moe_rt_stream_create(MOE_RT_CPU, &s), MOE_RT_OK); }
  ~CpuStream() { moe_rt_stream_destroy(s); }
  moe_rt_status sync() { return moe_rt_stream_synchronize(s, 10.0); }
};

//===--- the device copies of the kernels' math ---------------------------===//

TEST(DeviceMath, CopiesAgreeBitForBit) {
  for (uint64_t seed : {0ull, 1ull, 12345ull, ~0ull}) {
    EXPECT_EQ(dev::gates::mix64(seed), k::mix64(seed));
    for (int64_t pos : {0, 1, 7, 1000}) {
      uint64_t h = k::positionHash(seed, pos);
      EXPECT_EQ(dev::gates::positionHash(seed, pos), h);
      for (int64_t e = 0; e < 17; ++e)
        EXPECT_EQ(dev::gates::gateNoise(h, e), k::gateNoise(h, e));
    }
    for (int64_t sample : {0, 1, 5, 1 << 20})
      EXPECT_EQ(dev::gates::sampleSeed(seed, sample),
                k::sampleSeed(seed, sample));
  }
  const moe_rt_activation acts[] = {MOE_RT_RELU, MOE_RT_GELU, MOE_RT_SILU};
  for (double v : {-30.0, -3.5, -1.0, -1e-3, 0.0, 1e-3, 0.7, 2.0, 19.9, 20.1,
                   40.0}) {
    EXPECT_EQ(dev::gates::softplus(v), k::softplus(v)) << v;
    EXPECT_EQ(dev::gates::sigmoid(v), k::sigmoid(v)) << v;
    for (moe_rt_activation a : acts) {
      EXPECT_EQ(dev::ffn::activate(a, v), k::activate(k::Activation(a), v))
          << a << " " << v;
      EXPECT_EQ(dev::ffn::activateGrad(a, v),
                k::activateGrad(k::Activation(a), v))
          << a << " " << v;
    }
  }
}

//===--- gates ------------------------------------------------------------===//

struct GateCase {
  moe_rt_gate_kind kind;
  int64_t k;
  bool normalize;
};

std::string name(const GateCase &c) {
  const char *kinds[] = {"softmax_topk", "noisy_topk", "sigmoid", "cosine"};
  return std::string(kinds[c.kind]) + " k=" + std::to_string(c.k) +
         (c.normalize ? " normalize" : "");
}

/// x is B x N x M (N the sequence, for noisy_topk's noise); w M x E (D x E
/// for cosine), aux as the kind needs.
struct GateData {
  static constexpr int64_t B = 2, N = 5, M = 6, E = 5, D = 4;
  static constexpr int64_t T = B * N;
  GateCase c;
  bool aux;
  int64_t wRows;
  Tensor x{{B, N, M}}, w, auxT;
  explicit GateData(GateCase gc, unsigned seed)
      : c(gc), aux(gc.kind == MOE_RT_GATE_NOISY_TOPK ||
                   gc.kind == MOE_RT_GATE_COSINE),
        wRows(gc.kind == MOE_RT_GATE_COSINE ? D : M), w({wRows, E}),
        auxT({M, gc.kind == MOE_RT_GATE_COSINE ? D : E}) {
    fill(x, randomVec(x.n(), seed));
    fill(w, randomVec(w.n(), seed + 1));
    fill(auxT, randomVec(auxT.n(), seed + 2, 0.5f));
  }
  dev::GateShape shape(double tau, uint64_t seed) const {
    dev::GateShape z;
    z.kind = c.kind;
    z.tokens = T;
    z.m = M;
    z.experts = E;
    z.d = c.kind == MOE_RT_GATE_COSINE ? D : M;
    z.seq = N;
    z.k = c.k;
    z.normalize = c.normalize;
    z.seed = seed;
    z.firstSample = kFirstSample;
    z.tau = tau;
    return z;
  }
  /// The batch index of x's sample 0 (as on micro-batch 1 of R = 2 with
  /// B = 6): noisy_topk's noise must follow it on both sides.
  static constexpr int64_t kFirstSample = 3;
  const moe_rt_tensor *auxPtr() { return aux ? &auxT : nullptr; }
};

std::vector<GateCase> gateCases() {
  std::vector<GateCase> cases;
  for (moe_rt_gate_kind kind :
       {MOE_RT_GATE_SOFTMAX_TOPK, MOE_RT_GATE_NOISY_TOPK, MOE_RT_GATE_SIGMOID,
        MOE_RT_GATE_COSINE})
    for (int64_t kk : {1, 2})
      for (bool norm : {false, true})
        cases.push_back({kind, kk, norm});
  return cases;
}

TEST(DeviceGate, ForwardMatchesCpuOpForEveryKind) {
  const double tau = 0.5;
  const uint64_t seed = 77;
  unsigned dataSeed = 10;
  for (GateCase c : gateCases()) {
    SCOPED_TRACE(name(c));
    GateData g(c, dataSeed += 3);
    const int64_t T = GateData::T, E = GateData::E;
    Tensor idx({T, c.k}, MOE_RT_I64), wts({T, c.k}), counts({E}, MOE_RT_I64);
    CpuStream cpu;
    ASSERT_EQ(moe_rt_gate_at(cpu.s, c.kind, c.k, c.normalize, seed,
                             GateData::kFirstSample, tau, &g.x, &g.w,
                             g.auxPtr(), &idx, &wts, &counts),
              MOE_RT_OK);
    ASSERT_EQ(cpu.sync(), MOE_RT_OK);

    std::vector<int64_t> dIdx(T * c.k, -7), dCounts(E, -7);
    std::vector<float> dWts(T * c.k, -7);
    CheckedExecutor ex;
    ASSERT_EQ(dev::gateForward(ex, g.shape(tau, seed), g.x.f(), g.w.f(),
                               g.aux ? g.auxT.f() : nullptr, dIdx.data(),
                               dWts.data(), dCounts.data()),
              MOE_RT_OK)
        << ex.message();
    EXPECT_GE(ex.gemms(), 1);
    expectEqual(dIdx.data(), idx.i(), T * c.k, "indices");
    expectEqual(dCounts.data(), counts.i(), E, "counts");
    expectClose(dWts.data(), wts.f(), T * c.k, "weights");
  }
}

TEST(DeviceGate, BackwardMatchesCpuOpForEveryKind) {
  const double tau = 0.5;
  const uint64_t seed = 5;
  unsigned dataSeed = 100;
  for (GateCase c : gateCases()) {
    SCOPED_TRACE(name(c));
    GateData g(c, dataSeed += 3);
    const int64_t T = GateData::T;
    Tensor dweights({T, c.k}), dx({GateData::B, GateData::N, GateData::M}),
        dw({g.wRows, GateData::E}), daux({GateData::M, g.auxT.t.shape[1]});
    fill(dweights, randomVec(dweights.n(), dataSeed + 50));
    CpuStream cpu;
    ASSERT_EQ(moe_rt_gate_grad_at(cpu.s, c.kind, c.k, c.normalize, seed,
                                  GateData::kFirstSample, tau, &g.x, &g.w,
                                  g.auxPtr(), &dweights, &dx, &dw,
                                  g.aux ? &daux : nullptr),
              MOE_RT_OK);
    ASSERT_EQ(cpu.sync(), MOE_RT_OK);

    // Garbage in the outputs: the op must overwrite them.
    std::vector<float> ddx(dx.n(), 9), ddw(dw.n(), 9), ddaux(daux.n(), 9);
    CheckedExecutor ex;
    ASSERT_EQ(dev::gateBackward(ex, g.shape(tau, seed), g.x.f(), g.w.f(),
                                g.aux ? g.auxT.f() : nullptr, dweights.f(),
                                ddx.data(), ddw.data(),
                                g.aux ? ddaux.data() : nullptr),
              MOE_RT_OK)
        << ex.message();
    // One renormalised choice has the constant weight 1: no gradient.
    bool constant = c.k == 1 && c.normalize;
    if (!constant)
      EXPECT_GT(maxAbs(dx.f(), dx.n()), 1e-4);
    expectClose(ddx.data(), dx.f(), dx.n(), "dx");
    expectClose(ddw.data(), dw.f(), dw.n(), "dw");
    if (g.aux) {
      if (!constant)
        EXPECT_GT(maxAbs(daux.f(), daux.n()), 1e-6);
      expectClose(ddaux.data(), daux.f(), daux.n(), "daux");
    }
  }
}

TEST(DeviceGate, TiesGoToTheLowerExpert) {
  // Equal logits everywhere but expert 3 (larger): top-3 is 3, 0, 1.
  const int64_t T = 2, M = 2, E = 5, K = 3;
  std::vector<float> x = {1, 0, 0, 1}, w(M * E, 0.5f);
  w[3] = w[E + 3] = 2;
  dev::GateShape z;
  z.tokens = T;
  z.m = z.d = M;
  z.experts = E;
  z.k = K;
  for (moe_rt_gate_kind kind : {MOE_RT_GATE_SOFTMAX_TOPK, MOE_RT_GATE_SIGMOID}) {
    z.kind = kind;
    std::vector<int64_t> idx(T * K), counts(E);
    std::vector<float> wts(T * K);
    CheckedExecutor ex;
    ASSERT_EQ(dev::gateForward(ex, z, x.data(), w.data(), nullptr, idx.data(),
                               wts.data(), counts.data()),
              MOE_RT_OK);
    EXPECT_EQ(idx, (std::vector<int64_t>{3, 0, 1, 3, 0, 1}));
    EXPECT_EQ(counts, (std::vector<int64_t>{2, 2, 0, 2, 0}));
  }
}

TEST(DeviceGate, ExpertChoiceMatchesCpuKernels) {
  const int64_t T = 9, M = 4, E = 3;
  std::vector<float> x = randomVec(T * M, 31), w = randomVec(M * E, 32);
  std::vector<float> logits(T * E);
  k::linearForward(T, M, E, x.data(), w.data(), (const float *)nullptr,
                   logits.data());
  for (int64_t C : {1, 4, 9}) {
    SCOPED_TRACE("C=" + std::to_string(C));
    dev::GateShape z;
    z.kind = MOE_RT_GATE_EXPERT_CHOICE;
    z.tokens = T;
    z.m = z.d = M;
    z.experts = E;
    z.k = C;
    std::vector<int64_t> idx(E * C), counts(E), rIdx(E * C), rCounts(E);
    std::vector<float> wts(E * C), rWts(E * C);
    k::expertChoiceTopC(T, E, C, logits.data(), rIdx.data(), rWts.data(),
                        rCounts.data());
    CheckedExecutor ex;
    ASSERT_EQ(dev::gateForward(ex, z, x.data(), w.data(), nullptr, idx.data(),
                               wts.data(), counts.data()),
              MOE_RT_OK);
    expectEqual(idx.data(), rIdx.data(), E * C, "indices");
    expectEqual(counts.data(), rCounts.data(), E, "counts");
    expectClose(wts.data(), rWts.data(), E * C, "weights");

    std::vector<float> dwts = randomVec(E * C, 33), dlogits(T * E, 0.0f),
                       rdx(T * M, 0.0f), rdw(M * E, 0.0f);
    k::expertChoiceBackward(T, E, C, logits.data(), rIdx.data(), dwts.data(),
                            dlogits.data());
    k::linearBackward(T, M, E, x.data(), w.data(), dlogits.data(), rdx.data(),
                      rdw.data(), (float *)nullptr);
    std::vector<float> ddx(T * M, 9), ddw(M * E, 9);
    CheckedExecutor bx;
    ASSERT_EQ(dev::gateBackward(bx, z, x.data(), w.data(), nullptr,
                                dwts.data(), ddx.data(), ddw.data(), nullptr),
              MOE_RT_OK);
    EXPECT_GT(maxAbs(rdx.data(), T * M), 1e-4);
    expectClose(ddx.data(), rdx.data(), T * M, "dx");
    expectClose(ddw.data(), rdw.data(), M * E, "dw");
  }
}

TEST(DeviceGate, ExpertChoiceTiesGoToTheLowerToken) {
  // Every token alike: every expert ties over all tokens and takes 0..C-1.
  const int64_t T = 5, M = 2, E = 3, C = 2;
  std::vector<float> x(T * M, 0.25f), w = randomVec(M * E, 41);
  dev::GateShape z;
  z.kind = MOE_RT_GATE_EXPERT_CHOICE;
  z.tokens = T;
  z.m = z.d = M;
  z.experts = E;
  z.k = C;
  std::vector<int64_t> idx(E * C), counts(E);
  std::vector<float> wts(E * C);
  CheckedExecutor ex;
  ASSERT_EQ(dev::gateForward(ex, z, x.data(), w.data(), nullptr, idx.data(),
                             wts.data(), counts.data()),
            MOE_RT_OK);
  EXPECT_EQ(idx, (std::vector<int64_t>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(counts, (std::vector<int64_t>{C, C, C}));
}

//===--- routing ------------------------------------------------------------===//

/// k distinct experts per token, in a random order.
std::vector<int64_t> randomChoices(int64_t T, int64_t kk, int64_t E,
                                   unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> idx(T * kk), perm(E);
  for (int64_t t = 0; t < T; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy(perm.begin(), perm.begin() + kk, idx.begin() + t * kk);
  }
  return idx;
}

TEST(DeviceRouting, SlotsInGShardOrderWithAndWithoutDrops) {
  const int64_t T = 13, E = 4;
  for (int64_t kk : {1, 2})
    for (int64_t C : {2, 5, 26}) { // 2 and 5 drop, 26 = T k never does
      SCOPED_TRACE("k=" + std::to_string(kk) + " C=" + std::to_string(C));
      std::vector<int64_t> idx = randomChoices(T, kk, E, unsigned(C * 7 + kk));
      std::vector<int64_t> want(T * kk);
      k::routeTokens(T, E, kk, C, idx.data(), want.data());
      // One chunk, and chunks that split the choices and the tokens.
      for (int64_t chunk : {int64_t(1), int64_t(3), int64_t(7),
                            dev::kRouteChunk}) {
        std::vector<int64_t> got(T * kk, -5);
        CheckedExecutor ex;
        ASSERT_EQ(dev::routeTokens(ex, T, E, kk, C, idx.data(), got.data(),
                                   chunk),
                  MOE_RT_OK);
        expectEqual(got.data(), want.data(), T * kk,
                    "slots (chunk " + std::to_string(chunk) + ")");
      }
      int64_t dropped = std::count(want.begin(), want.end(), -1);
      if (C == 2)
        EXPECT_GT(dropped, 0);
      if (C == 26)
        EXPECT_EQ(dropped, 0);
    }
}

TEST(DeviceRouting, AnExpertIndexOutOfRangeFailsTheStream) {
  std::vector<int64_t> idx = {0, 1, 4, 2}, slots(4);
  CheckedExecutor ex;
  EXPECT_EQ(dev::routeTokens(ex, 2, 4, 2, 3, idx.data(), slots.data()),
            MOE_RT_BACKEND_ERROR);
  EXPECT_NE(ex.message().find("outside [0, E)"), std::string::npos)
      << ex.message();
  EXPECT_EQ(slots[2], -1);
}

/// G simulated ranks of one routed op: each rank's token-side data, and an
/// all-to-all over per-rank E x C x M buffers.
struct Ranks {
  dev::RouteShape r;
  std::vector<std::vector<int64_t>> idx;
  std::vector<std::vector<float>> x, weights, expertSide, dy;
  Ranks(int64_t G, int64_t El, int64_t C, int64_t T, int64_t kk, int64_t M,
        unsigned seed) {
    r.T = T;
    r.k = kk;
    r.G = G;
    r.El = El;
    r.E = G * El;
    r.C = C;
    r.M = M;
    for (int64_t g = 0; g < G; ++g) {
      unsigned s = seed + unsigned(g) * 10;
      idx.push_back(randomChoices(T, kk, r.E, s));
      x.push_back(randomVec(T * M, s + 1));
      weights.push_back(randomVec(T * kk, s + 2));
      expertSide.push_back(randomVec(r.E * C * M, s + 3));
      dy.push_back(randomVec(T * M, s + 4));
    }
  }
  int64_t buffer() const { return r.E * r.C * r.M; }
  std::vector<std::vector<float>>
  allToAll(const std::vector<std::vector<float>> &send) const {
    return exchangeAll(r, send);
  }
  /// recv[g] part i = send[i] part g (parts of El x C x M along dim 0), for
  /// buffers of shape `s` (rk.r, or a window of its slots).
  static std::vector<std::vector<float>>
  exchangeAll(const dev::RouteShape &s,
              const std::vector<std::vector<float>> &send) {
    int64_t part = s.El * s.C * s.M;
    std::vector<std::vector<float>> recv(s.G,
                                         std::vector<float>(s.E * s.C * s.M));
    for (int64_t g = 0; g < s.G; ++g)
      for (int64_t i = 0; i < s.G; ++i)
        std::copy(send[i].begin() + g * part, send[i].begin() + (g + 1) * part,
                  recv[g].begin() + i * part);
    return recv;
  }
};

struct LayoutCase {
  int64_t G, El, C, k;
};

std::vector<LayoutCase> layoutCases() {
  std::vector<LayoutCase> cases;
  for (int64_t G : {1, 2, 4})
    for (int64_t El : {1, 3})
      for (int64_t C : {2, 7})
        cases.push_back({G, El, C, G * El >= 2 ? 2 : 1});
  return cases;
}

std::string name(const LayoutCase &c) {
  return "G=" + std::to_string(c.G) + " El=" + std::to_string(c.El) +
         " C=" + std::to_string(c.C) + " k=" + std::to_string(c.k);
}

TEST(DeviceRouting, DispatchAndItsGradMatchCpuKernels) {
  const int64_t T = 6, M = 3;
  for (LayoutCase c : layoutCases()) {
    SCOPED_TRACE(name(c));
    Ranks rk(c.G, c.El, c.C, T, c.k, M, unsigned(c.G * 100 + c.El * 10 + c.C));
    const dev::RouteShape &r = rk.r;
    // Forward, reference: routeTokens + dispatchLayout, exchange,
    // toExpertMajor.
    std::vector<std::vector<float>> send(c.G), dsend(c.G);
    for (int64_t g = 0; g < c.G; ++g) {
      std::vector<int64_t> slots(T * c.k);
      send[g].assign(rk.buffer(), 0);
      k::routeTokens(T, r.E, c.k, c.C, rk.idx[g].data(), slots.data());
      k::dispatchLayout(T, c.k, r.E, c.C, M, rk.idx[g].data(), slots.data(),
                        rk.x[g].data(), send[g].data());
      std::vector<int64_t> dslots(T * c.k);
      dsend[g].assign(rk.buffer(), -3);
      CheckedExecutor ex;
      ASSERT_EQ(dev::dispatchSend(ex, r, rk.x[g].data(), rk.idx[g].data(),
                                  dslots.data(), dsend[g].data()),
                MOE_RT_OK);
    }
    auto recv = rk.allToAll(send), drecv = rk.allToAll(dsend);
    for (int64_t g = 0; g < c.G; ++g) {
      std::vector<float> want(rk.buffer()), got(rk.buffer(), -3);
      k::toExpertMajor(c.G, c.El, c.C, M, recv[g].data(), want.data());
      CheckedExecutor ex;
      ASSERT_EQ(dev::dispatchRecv(ex, r, drecv[g].data(), got.data()),
                MOE_RT_OK);
      EXPECT_GT(maxAbs(want.data(), rk.buffer()), 0);
      expectClose(got.data(), want.data(), rk.buffer(),
                  "dispatch out rank " + std::to_string(g), 0);
    }
    // Backward: dout = the expert-side data; toRankMajor, exchange,
    // dispatchLayoutBackward.
    std::vector<std::vector<float>> gsend(c.G), gdsend(c.G);
    for (int64_t g = 0; g < c.G; ++g) {
      gsend[g].assign(rk.buffer(), 0);
      gdsend[g].assign(rk.buffer(), -3);
      k::toRankMajor(c.G, c.El, c.C, M, rk.expertSide[g].data(),
                     gsend[g].data());
      CheckedExecutor ex;
      ASSERT_EQ(dev::dispatchGradSend(ex, r, rk.expertSide[g].data(),
                                      gdsend[g].data()),
                MOE_RT_OK);
    }
    auto grecv = rk.allToAll(gsend), gdrecv = rk.allToAll(gdsend);
    for (int64_t g = 0; g < c.G; ++g) {
      std::vector<int64_t> slots(T * c.k), dslots(T * c.k);
      std::vector<float> want(T * M, 0.0f), got(T * M, 5.0f);
      k::routeTokens(T, r.E, c.k, c.C, rk.idx[g].data(), slots.data());
      k::dispatchLayoutBackward(T, c.k, c.C, M, rk.idx[g].data(),
                                slots.data(), grecv[g].data(), want.data());
      CheckedExecutor ex;
      ASSERT_EQ(dev::dispatchGradRecv(ex, r, rk.idx[g].data(), dslots.data(),
                                      gdrecv[g].data(), got.data()),
                MOE_RT_OK);
      EXPECT_GT(maxAbs(want.data(), T * M), 0);
      expectClose(got.data(), want.data(), T * M,
                  "dispatch dx rank " + std::to_string(g), 1e-6);
    }
  }
}

TEST(DeviceRouting, CombineAndItsGradMatchCpuKernels) {
  const int64_t T = 6, M = 3;
  for (LayoutCase c : layoutCases()) {
    SCOPED_TRACE(name(c));
    Ranks rk(c.G, c.El, c.C, T, c.k, M, unsigned(c.G * 77 + c.El * 5 + c.C));
    const dev::RouteShape &r = rk.r;
    std::vector<std::vector<float>> send(c.G), dsend(c.G);
    for (int64_t g = 0; g < c.G; ++g) {
      send[g].assign(rk.buffer(), 0);
      dsend[g].assign(rk.buffer(), -3);
      k::toRankMajor(c.G, c.El, c.C, M, rk.expertSide[g].data(),
                     send[g].data());
      CheckedExecutor ex;
      ASSERT_EQ(dev::combineSend(ex, r, rk.expertSide[g].data(),
                                 dsend[g].data()),
                MOE_RT_OK);
    }
    auto recv = rk.allToAll(send), drecv = rk.allToAll(dsend);
    // Forward.
    for (int64_t g = 0; g < c.G; ++g) {
      std::vector<int64_t> slots(T * c.k), dslots(T * c.k);
      std::vector<float> want(T * M), got(T * M, 5.0f);
      k::routeTokens(T, r.E, c.k, c.C, rk.idx[g].data(), slots.data());
      k::combineGather(T, c.k, c.C, M, rk.idx[g].data(), slots.data(),
                       rk.weights[g].data(), recv[g].data(), want.data());
      CheckedExecutor ex;
      ASSERT_EQ(dev::combineRecv(ex, r, rk.idx[g].data(), dslots.data(),
                                 rk.weights[g].data(), drecv[g].data(),
                                 got.data()),
                MOE_RT_OK);
      EXPECT_GT(maxAbs(want.data(), T * M), 0);
      expectClose(got.data(), want.data(), T * M,
                  "combine out rank " + std::to_string(g), 1e-6);
    }
    // Backward, between the exchanges: dweights and the rows to send back.
    std::vector<std::vector<float>> back(c.G), dback(c.G);
    for (int64_t g = 0; g < c.G; ++g) {
      std::vector<int64_t> slots(T * c.k), dslots(T * c.k);
      std::vector<float> wantDw(T * c.k, 0.0f), gotDw(T * c.k, 5.0f);
      back[g].assign(rk.buffer(), 0.0f);
      dback[g].assign(rk.buffer(), 5.0f);
      k::routeTokens(T, r.E, c.k, c.C, rk.idx[g].data(), slots.data());
      k::combineGatherBackward(T, c.k, c.C, M, rk.idx[g].data(), slots.data(),
                               rk.weights[g].data(), recv[g].data(),
                               rk.dy[g].data(), back[g].data(), wantDw.data());
      CheckedExecutor ex;
      ASSERT_EQ(dev::combineGradMid(ex, r, rk.idx[g].data(), dslots.data(),
                                    rk.weights[g].data(), drecv[g].data(),
                                    rk.dy[g].data(), dback[g].data(),
                                    gotDw.data()),
                MOE_RT_OK);
      EXPECT_GT(maxAbs(wantDw.data(), T * c.k), 0);
      expectClose(gotDw.data(), wantDw.data(), T * c.k,
                  "dweights rank " + std::to_string(g), 1e-6);
    }
    auto ret = rk.allToAll(back), dret = rk.allToAll(dback);
    for (int64_t g = 0; g < c.G; ++g) {
      std::vector<float> want(rk.buffer()), got(rk.buffer(), 5.0f);
      k::toExpertMajor(c.G, c.El, c.C, M, ret[g].data(), want.data());
      CheckedExecutor ex;
      ASSERT_EQ(dev::combineGradRecv(ex, r, dret[g].data(), got.data()),
                MOE_RT_OK);
      expectClose(got.data(), want.data(), rk.buffer(),
                  "dexpert_out rank " + std::to_string(g), 1e-6);
    }
  }
}

//===--- token chunks: windows of the capacity slots ---------------------===//

using PerRank = std::vector<std::vector<float>>;

/// A window [first, first + count) of r's slots.
dev::RouteShape windowOf(const dev::RouteShape &r, int64_t first,
                         int64_t count) {
  dev::RouteShape w = r;
  w.O = first;
  w.C = count;
  return w;
}

/// The slots of window `w` of an El x (G C) x M expert side (C = full).
std::vector<float> sliceSlots(const std::vector<float> &full,
                              const dev::RouteShape &w, int64_t C) {
  std::vector<float> out(w.El * w.G * w.C * w.M);
  for (int64_t lg = 0; lg < w.El * w.G; ++lg)
    std::copy(full.begin() + (lg * C + w.O) * w.M,
              full.begin() + (lg * C + w.O + w.C) * w.M,
              out.begin() + lg * w.C * w.M);
  return out;
}

/// moe_rt_dispatch's phases on every rank, shape s: El x (G s.C) x M each.
PerRank dispatchAll(const Ranks &rk, const dev::RouteShape &s) {
  int64_t n = s.E * s.C * s.M;
  PerRank send(s.G, std::vector<float>(n)), out(s.G, std::vector<float>(n));
  for (int64_t g = 0; g < s.G; ++g) {
    std::vector<int64_t> slots(s.T * s.k);
    CheckedExecutor ex;
    EXPECT_EQ(dev::dispatchSend(ex, s, rk.x[g].data(), rk.idx[g].data(),
                                slots.data(), send[g].data()),
              MOE_RT_OK);
  }
  PerRank recv = Ranks::exchangeAll(s, send);
  for (int64_t g = 0; g < s.G; ++g) {
    CheckedExecutor ex;
    EXPECT_EQ(dev::dispatchRecv(ex, s, recv[g].data(), out[g].data()),
              MOE_RT_OK);
  }
  return out;
}

/// moe_rt_combine (grad: moe_rt_dispatch_grad) of `expertSide` on every
/// rank, shape s: T x M each.
PerRank combineAll(const Ranks &rk, const dev::RouteShape &s,
                   const PerRank &expertSide, bool dispatchGrad) {
  int64_t n = s.E * s.C * s.M;
  PerRank send(s.G, std::vector<float>(n)),
      out(s.G, std::vector<float>(s.T * s.M, 7.0f));
  for (int64_t g = 0; g < s.G; ++g) {
    CheckedExecutor ex;
    EXPECT_EQ(dev::combineSend(ex, s, expertSide[g].data(), send[g].data()),
              MOE_RT_OK);
  }
  PerRank recv = Ranks::exchangeAll(s, send);
  for (int64_t g = 0; g < s.G; ++g) {
    std::vector<int64_t> slots(s.T * s.k);
    CheckedExecutor ex;
    EXPECT_EQ(dispatchGrad
                  ? dev::dispatchGradRecv(ex, s, rk.idx[g].data(), slots.data(),
                                          recv[g].data(), out[g].data())
                  : dev::combineRecv(ex, s, rk.idx[g].data(), slots.data(),
                                     rk.weights[g].data(), recv[g].data(),
                                     out[g].data()),
              MOE_RT_OK);
  }
  return out;
}

// Token-level pipelining: the windows of a partition of the capacity (sizes
// 2, 3, 2 of C = 7; 1, 1 of C = 2, which drops tokens) move exactly the
// whole op's slots: each window's dispatch is its slice of the whole
// dispatch, and the windows' combines (and dispatch vjps) sum to the whole.
TEST(DeviceRouting, WindowsOfTheSlotsPartitionDispatchAndCombine) {
  const int64_t T = 6, M = 3;
  for (LayoutCase c : layoutCases()) {
    SCOPED_TRACE(name(c));
    Ranks rk(c.G, c.El, c.C, T, c.k, M, unsigned(c.G * 31 + c.El * 3 + c.C));
    PerRank whole = dispatchAll(rk, rk.r);
    PerRank wholeCombine = combineAll(rk, rk.r, rk.expertSide, false);
    PerRank wholeDx = combineAll(rk, rk.r, rk.expertSide, true);
    PerRank sumCombine(c.G, std::vector<float>(T * M, 0.0f)),
        sumDx = sumCombine;
    std::vector<int64_t> cuts =
        c.C == 7 ? std::vector<int64_t>{0, 2, 5, 7} : std::vector<int64_t>{0, 1, 2};
    for (size_t j = 0; j + 1 < cuts.size(); ++j) {
      dev::RouteShape w = windowOf(rk.r, cuts[j], cuts[j + 1] - cuts[j]);
      PerRank part = dispatchAll(rk, w), side(c.G);
      for (int64_t g = 0; g < c.G; ++g) {
        std::vector<float> want = sliceSlots(whole[g], w, c.C);
        expectClose(part[g].data(), want.data(), want.size(),
                    "window " + std::to_string(j) + " rank " +
                        std::to_string(g),
                    0);
        side[g] = sliceSlots(rk.expertSide[g], w, c.C);
      }
      PerRank y = combineAll(rk, w, side, false),
              dx = combineAll(rk, w, side, true);
      for (int64_t g = 0; g < c.G; ++g)
        for (int64_t i = 0; i < T * M; ++i) {
          sumCombine[g][i] += y[g][i];
          sumDx[g][i] += dx[g][i];
        }
    }
    for (int64_t g = 0; g < c.G; ++g) {
      EXPECT_GT(maxAbs(wholeCombine[g].data(), T * M), 0);
      expectClose(sumCombine[g].data(), wholeCombine[g].data(), T * M,
                  "sum of combines rank " + std::to_string(g), 1e-6);
      expectClose(sumDx[g].data(), wholeDx[g].data(), T * M,
                  "sum of dispatch vjps rank " + std::to_string(g), 1e-6);
    }
  }
}

/// Expert-choice indices (E x C): each expert's C distinct tokens, about
/// a quarter of the slots left empty (-1).
std::vector<int64_t> ecIndices(int64_t E, int64_t C, int64_t T,
                               unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> idx(E * C), perm(T);
  for (int64_t e = 0; e < E; ++e) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t c = 0; c < C; ++c)
      idx[e * C + c] = rng() % 4 == 0 ? -1 : perm[c];
  }
  return idx;
}

// Expert choice's token-side phases; the transposes and exchanges around
// them are token choice's, checked above.
TEST(DeviceRouting, ExpertChoiceLayoutsMatchCpuKernels) {
  const int64_t T = 6, M = 3;
  for (int64_t E : {1, 2, 4, 6})
    for (int64_t C : {1, 3, 6}) {
      SCOPED_TRACE("E=" + std::to_string(E) + " C=" + std::to_string(C));
      dev::RouteShape r;
      r.T = T;
      r.E = r.El = E;
      r.C = C;
      r.M = M;
      r.ec = true;
      unsigned seed = unsigned(E * 31 + C);
      std::vector<int64_t> idx = ecIndices(E, C, T, seed);
      std::vector<float> x = randomVec(T * M, seed + 1),
                         buf = randomVec(E * C * M, seed + 2),
                         w = randomVec(E * C, seed + 3),
                         dy = randomVec(T * M, seed + 4);
      std::vector<int64_t> table(T * E, 99);
      {
        std::vector<float> want(E * C * M), got(E * C * M, 5.0f);
        k::ecDispatchLayout(E, C, M, idx.data(), x.data(), want.data());
        CheckedExecutor ex;
        ASSERT_EQ(dev::ecDispatchSend(ex, r, x.data(), idx.data(), got.data()),
                  MOE_RT_OK);
        expectClose(got.data(), want.data(), E * C * M, "ec send", 0);
      }
      {
        std::vector<float> want(T * M, 0.0f), got(T * M, 5.0f);
        k::ecDispatchLayoutBackward(E, C, M, idx.data(), buf.data(),
                                    want.data());
        CheckedExecutor ex;
        ASSERT_EQ(dev::ecDispatchGradRecv(ex, r, idx.data(), table.data(),
                                          buf.data(), got.data()),
                  MOE_RT_OK);
        expectClose(got.data(), want.data(), T * M, "ec dx", 1e-6);
      }
      {
        std::vector<float> want(T * M), got(T * M, 5.0f);
        k::ecCombineGather(T, E, C, M, idx.data(), w.data(), buf.data(),
                           want.data());
        CheckedExecutor ex;
        ASSERT_EQ(dev::ecCombineRecv(ex, r, idx.data(), table.data(),
                                     w.data(), buf.data(), got.data()),
                  MOE_RT_OK);
        EXPECT_GT(maxAbs(want.data(), T * M), 0);
        expectClose(got.data(), want.data(), T * M, "ec combine", 1e-6);
      }
      {
        std::vector<float> wantR(E * C * M, 0.0f), gotR(E * C * M, 5.0f),
            wantW(E * C, 0.0f), gotW(E * C, 5.0f);
        k::ecCombineGatherBackward(E, C, M, idx.data(), w.data(), buf.data(),
                                   dy.data(), wantR.data(), wantW.data());
        CheckedExecutor ex;
        ASSERT_EQ(dev::ecCombineGradMid(ex, r, idx.data(), w.data(),
                                        buf.data(), dy.data(), gotR.data(),
                                        gotW.data()),
                  MOE_RT_OK);
        EXPECT_GT(maxAbs(wantW.data(), E * C), 0);
        expectClose(gotR.data(), wantR.data(), E * C * M, "ec drecv", 1e-6);
        expectClose(gotW.data(), wantW.data(), E * C, "ec dweights", 1e-6);
      }
    }
}

TEST(DeviceRouting, AnExpertChoiceIndexThatIsNoTokenFailsTheStream) {
  dev::RouteShape r;
  r.T = 3;
  r.E = r.El = 2;
  r.C = 2;
  r.M = 1;
  r.ec = true;
  std::vector<int64_t> idx = {0, -1, 3, 1}, table(6);
  std::vector<float> x(3, 1.0f), send(4);
  CheckedExecutor ex;
  EXPECT_EQ(dev::ecDispatchSend(ex, r, x.data(), idx.data(), send.data()),
            MOE_RT_BACKEND_ERROR);
  EXPECT_NE(ex.message().find("neither -1 nor a token id"), std::string::npos)
      << ex.message();
}

//===--- experts ------------------------------------------------------------===//

TEST(DeviceExpert, ForwardAndGradsMatchCpuOps) {
  const int64_t El = 3, S = 4, M = 5, H = 7;
  unsigned seed = 500;
  for (bool grouped : {true, false})
    for (moe_rt_activation act : {MOE_RT_RELU, MOE_RT_GELU, MOE_RT_SILU})
      for (bool gated : {false, true}) {
        SCOPED_TRACE(std::string(grouped ? "3-D" : "2-D") + " act=" +
                     std::to_string(int(act)) + (gated ? " gated" : ""));
        std::vector<int64_t> xs = grouped ? std::vector<int64_t>{El, S, M}
                                          : std::vector<int64_t>{2, S, M};
        std::vector<int64_t> ups = grouped ? std::vector<int64_t>{El, M, H}
                                           : std::vector<int64_t>{M, H};
        std::vector<int64_t> downs = grouped ? std::vector<int64_t>{El, H, M}
                                             : std::vector<int64_t>{H, M};
        Tensor x(xs), up(ups), gate(ups), down(downs), dout(xs), out(xs),
            dx(xs), dup(ups), dgate(ups), ddown(downs);
        fill(x, randomVec(x.n(), seed += 5));
        fill(up, randomVec(up.n(), seed + 1, 0.5f));
        fill(gate, randomVec(gate.n(), seed + 2, 0.5f));
        fill(down, randomVec(down.n(), seed + 3, 0.5f));
        fill(dout, randomVec(dout.n(), seed + 4));
        CpuStream cpu;
        ASSERT_EQ(moe_rt_expert(cpu.s, act, &x, &up, gated ? &gate : nullptr,
                                &down, &out),
                  MOE_RT_OK);
        ASSERT_EQ(moe_rt_expert_grad(cpu.s, act, &x, &up,
                                     gated ? &gate : nullptr, &down, &dout,
                                     &dx, &dup, gated ? &dgate : nullptr,
                                     &ddown),
                  MOE_RT_OK);
        ASSERT_EQ(cpu.sync(), MOE_RT_OK);

        dev::ExpertShape f;
        f.experts = grouped ? El : 1;
        f.slots = grouped ? S : 2 * S;
        f.m = M;
        f.h = H;
        std::vector<float> y(out.n(), 9), gx(dx.n(), 9), gup(dup.n(), 9),
            ggate(dgate.n(), 9), gdown(ddown.n(), 9);
        CheckedExecutor ex;
        ASSERT_EQ(dev::expertForward(ex, act, f, x.f(), up.f(),
                                     gated ? gate.f() : nullptr, down.f(),
                                     y.data()),
                  MOE_RT_OK);
        CheckedExecutor bx;
        ASSERT_EQ(dev::expertBackward(bx, act, f, x.f(), up.f(),
                                      gated ? gate.f() : nullptr, down.f(),
                                      dout.f(), gx.data(), gup.data(),
                                      gated ? ggate.data() : nullptr,
                                      gdown.data()),
                  MOE_RT_OK);
        EXPECT_GT(maxAbs(out.f(), out.n()), 1e-3);
        EXPECT_GT(maxAbs(dup.f(), dup.n()), 1e-3);
        expectClose(y.data(), out.f(), out.n(), "y", 1e-4);
        expectClose(gx.data(), dx.f(), dx.n(), "dx", 1e-4);
        expectClose(gup.data(), dup.f(), dup.n(), "dup", 1e-4);
        expectClose(gdown.data(), ddown.f(), ddown.n(), "ddown", 1e-4);
        if (gated) {
          EXPECT_GT(maxAbs(dgate.f(), dgate.n()), 1e-3);
          expectClose(ggate.data(), dgate.f(), dgate.n(), "dgate", 1e-4);
        }
      }
}

//===--- the CUDA entry points --------------------------------------------===//

#ifdef MOE_RT_HAVE_CUDA
// Without a GPU the entry points still link and, handed a CPU stream,
// refuse it before touching a pointer or the group (both null here).
TEST(DeviceRoutingCuda, EntryPointsRefuseACpuStream) {
  CpuStream cpu;
  namespace cu = moe_rt::cuda;
  float *f = nullptr;
  int64_t *ids = nullptr;
  dev::GateShape z;
  z.tokens = 4;
  z.m = z.d = 3;
  z.experts = 2;
  dev::ExpertShape e;
  e.slots = 4;
  e.m = 3;
  e.h = 5;
  dev::RouteShape r;
  r.T = 4;
  r.E = r.El = 2;
  r.C = 2;
  r.M = 3;
  std::vector<std::pair<const char *, moe_rt_status>> calls = {
      {"gate", cu::gate(cpu.s, z, f, f, nullptr, ids, f, ids)},
      {"gateGrad", cu::gateGrad(cpu.s, z, f, f, nullptr, f, f, f, nullptr)},
      {"expert", cu::expert(cpu.s, MOE_RT_SILU, e, f, f, f, f, f)},
      {"expertGrad",
       cu::expertGrad(cpu.s, MOE_RT_GELU, e, f, f, nullptr, f, f, f, f,
                      nullptr, f)},
      {"dispatch", cu::dispatch(cpu.s, nullptr, r, f, ids, f)},
      {"dispatchGrad", cu::dispatchGrad(cpu.s, nullptr, r, ids, f, f)},
      {"combine", cu::combine(cpu.s, nullptr, r, f, ids, f, f)},
      {"combineGrad",
       cu::combineGrad(cpu.s, nullptr, r, f, ids, f, f, f, f)}};
  for (auto &[what, st] : calls) {
    EXPECT_EQ(st, MOE_RT_INVALID_ARGUMENT) << what;
  }
  EXPECT_NE(std::string(moe_rt_last_error()).find("not a CUDA stream"),
            std::string::npos)
      << moe_rt_last_error();
}
#endif

} // namespace
