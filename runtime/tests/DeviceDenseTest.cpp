//===- DeviceDenseTest.cpp - the CUDA dense ops, run on the host ----------===//
//
// The op templates of src/device/DenseOps.h and AttentionOps.h run with
// HostExecutor and are compared with the CPU kernels of
// src/kernels (Dense.h, Attention.h) to fp32 tolerance: every
// forward and every gradient, on random inputs. Gradient outputs start
// filled with garbage, so a body that accumulates where the op must
// overwrite fails. HostExecutor's GEMM is a column-major reference reached
// through toColumnMajor (the mapping CudaExecutor hands to cuBLAS); the
// Gemm tests check it against a naive row-major loop for every transpose
// combination, with padded leading dimensions and batch strides (0 too).
//
//===----------------------------------------------------------------------===//

#include "../src/device/AttentionOps.h"
#include "../src/device/DenseOps.h"
#include "CheckedExecutor.h"

#include "kernels/Attention.h"
#include "kernels/Dense.h"

#ifdef MOE_RT_HAVE_CUDA
#include "../src/cuda/CudaDenseOps.h"
#endif

#include "moe_rt/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace {

using moe_rt::device::HostExecutor;
namespace dev = moe_rt::device;
namespace k = moe_rt::kernels;
using Vec = std::vector<float>;

Vec randomVec(size_t n, std::mt19937 &rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0, scale);
  Vec v(n);
  for (float &x : v)
    x = d(rng);
  return v;
}

/// A buffer the op must overwrite entirely.
Vec garbage(size_t n) { return Vec(n, 123.25f); }

/// |got - want| <= rtol * max(1, max |want|) element-wise (fp32 rounding of
/// differently ordered sums; a wrong body is off by O(1) of that scale).
void expectClose(const Vec &got, const Vec &want, const std::string &what,
                 double rtol = 2e-5) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1;
  for (float w : want)
    scale = std::max(scale, double(std::abs(w)));
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double d = std::abs(double(got[i]) - want[i]);
    if (!(d <= worst)) { // NaN counts as the worst
      worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
      at = i;
    }
  }
  EXPECT_LE(worst, rtol * scale)
      << what << ": element " << at << " is " << got[at] << ", CPU kernel "
      << want[at] << " (scale " << scale << ")";
}

using moe_rt_test::CheckedExecutor;

//===--- GEMM through the column-major mapping ----------------------------===//

/// C_b = alpha op(A_b) op(B_b) + beta C_b, row-major, the obvious way.
void naiveGemm(const dev::GemmDesc &g, const Vec &a, const Vec &b, Vec &c) {
  for (int64_t bt = 0; bt < g.batch; ++bt)
    for (int64_t r = 0; r < g.m; ++r)
      for (int64_t col = 0; col < g.n; ++col) {
        double acc = 0;
        for (int64_t l = 0; l < g.k; ++l) {
          float av = g.transA ? a[bt * g.strideA + l * g.lda + r]
                              : a[bt * g.strideA + r * g.lda + l];
          float bv = g.transB ? b[bt * g.strideB + col * g.ldb + l]
                              : b[bt * g.strideB + l * g.ldb + col];
          acc += double(av) * bv;
        }
        float &out = c[bt * g.strideC + r * g.ldc + col];
        out = float(g.alpha * acc + (g.beta == 0 ? 0.0 : g.beta * out));
      }
}

struct GemmCase {
  bool transA, transB;
  bool sharedA, sharedB; // batch stride 0
  float beta;
};

void runGemmCase(const GemmCase &gc) {
  std::mt19937 rng(7 + gc.transA * 2 + gc.transB);
  const int64_t m = 3, n = 4, kk = 5, batch = 3;
  dev::GemmDesc g;
  g.transA = gc.transA;
  g.transB = gc.transB;
  g.m = m;
  g.n = n;
  g.k = kk;
  g.alpha = 0.75f;
  g.beta = gc.beta;
  g.batch = batch;
  // Stored A is m x k (or k x m transposed), padded rows; members apart by
  // more than their size so that a wrong stride reads other numbers.
  int64_t rowsA = gc.transA ? kk : m, colsA = gc.transA ? m : kk;
  int64_t rowsB = gc.transB ? n : kk, colsB = gc.transB ? kk : n;
  g.lda = colsA + 2;
  g.ldb = colsB + 1;
  g.ldc = n + 3;
  g.strideA = gc.sharedA ? 0 : rowsA * g.lda + 5;
  g.strideB = gc.sharedB ? 0 : rowsB * g.ldb + 2;
  g.strideC = m * g.ldc + 4;
  Vec a = randomVec(rowsA * g.lda + g.strideA * (batch - 1), rng);
  Vec b = randomVec(rowsB * g.ldb + g.strideB * (batch - 1), rng);
  Vec c0 = randomVec(g.strideC * batch, rng);
  Vec want = c0, got = c0;
  naiveGemm(g, a, b, want);
  g.a = a.data();
  g.b = b.data();
  g.c = got.data();
  CheckedExecutor ex;
  ASSERT_EQ(ex.gemm(g), MOE_RT_OK);
  std::string what = std::string("gemm transA=") + (gc.transA ? "1" : "0") +
                     " transB=" + (gc.transB ? "1" : "0") +
                     " sharedA=" + (gc.sharedA ? "1" : "0") +
                     " sharedB=" + (gc.sharedB ? "1" : "0") +
                     " beta=" + std::to_string(gc.beta);
  expectClose(got, want, what, 1e-6);
  // The padding between rows and batch members is untouched.
  for (int64_t bt = 0; bt < batch; ++bt)
    for (int64_t r = 0; r < m; ++r)
      for (int64_t col = n; col < g.ldc && bt * g.strideC + r * g.ldc + col <
                                              int64_t(got.size());
           ++col) {
        size_t i = bt * g.strideC + r * g.ldc + col;
        EXPECT_EQ(got[i], c0[i]) << what << " wrote padding " << i;
      }
}

TEST(DeviceDenseGemm, EveryTransposeBatchedAndStrided) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 0.5f}) {
        runGemmCase({ta, tb, false, false, beta});
        runGemmCase({ta, tb, true, false, beta});
        runGemmCase({ta, tb, false, true, beta});
      }
}

TEST(DeviceDenseGemm, PlainDescMatchesCpuGemm) {
  std::mt19937 rng(3);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t m = 4, n = 6, kk = 3;
      Vec a = randomVec(m * kk, rng), b = randomVec(kk * n, rng);
      Vec want(m * n, 0.0f), got = garbage(m * n);
      k::gemm(ta, tb, m, n, kk, 1.0f, a.data(), b.data(), 0.0f, want.data());
      CheckedExecutor ex;
      ASSERT_EQ(ex.gemm(dev::gemmDesc(ta, tb, m, n, kk, 1, a.data(), b.data(),
                                      0, got.data())),
                MOE_RT_OK);
      expectClose(got, want, "gemmDesc vs kernels::gemm", 1e-6);
    }
}

//===--- linear -----------------------------------------------------------===//

TEST(DeviceDense, LinearForwardAndBackward) {
  std::mt19937 rng(11);
  const int64_t rows = 7, kk = 5, n = 6;
  for (bool withBias : {false, true}) {
    Vec x = randomVec(rows * kk, rng), w = randomVec(kk * n, rng),
        bias = randomVec(n, rng), dy = randomVec(rows * n, rng);
    const float *pb = withBias ? bias.data() : nullptr;
    Vec want(rows * n), got = garbage(rows * n);
    k::linearForward(rows, kk, n, x.data(), w.data(), pb, want.data());
    CheckedExecutor ex;
    ASSERT_EQ(dev::linearForward(ex, rows, kk, n, x.data(), w.data(), pb,
                                 got.data()),
              MOE_RT_OK);
    expectClose(got, want, withBias ? "linear with bias" : "linear");

    Vec wantDx(rows * kk, 0), wantDw(kk * n, 0), wantDb(n, 0);
    k::linearBackward(rows, kk, n, x.data(), w.data(), dy.data(),
                      wantDx.data(), wantDw.data(), wantDb.data());
    Vec dx = garbage(rows * kk), dw = garbage(kk * n), db = garbage(n);
    ASSERT_EQ(dev::linearBackward(ex, rows, kk, n, x.data(), w.data(),
                                  dy.data(), dx.data(), dw.data(),
                                  withBias ? db.data() : nullptr),
              MOE_RT_OK);
    expectClose(dx, wantDx, "linear dx");
    expectClose(dw, wantDw, "linear dw");
    if (withBias)
      expectClose(db, wantDb, "linear dbias");
  }
}

//===--- norms ------------------------------------------------------------===//

struct NormCase {
  bool rms, withBias;
};

class DeviceDenseNorm : public ::testing::TestWithParam<NormCase> {};

TEST_P(DeviceDenseNorm, ForwardAndBackward) {
  NormCase nc = GetParam();
  std::mt19937 rng(21 + nc.rms * 2 + nc.withBias);
  const int64_t rows = 9, m = 16;
  const double eps = 1e-5;
  Vec x = randomVec(rows * m, rng, 2.0f), scale = randomVec(m, rng),
      bias = randomVec(m, rng), dy = randomVec(rows * m, rng);
  for (float &v : x)
    v += 0.5f; // a non-zero mean, so LayerNorm and RMSNorm differ
  const float *pb = nc.withBias ? bias.data() : nullptr;
  Vec want(rows * m), got = garbage(rows * m);
  k::normForward(nc.rms, rows, m, x.data(), scale.data(), pb, eps,
                 want.data());
  CheckedExecutor ex;
  ASSERT_EQ(dev::normForward(ex, nc.rms, rows, m, x.data(), scale.data(), pb,
                             eps, got.data()),
            MOE_RT_OK);
  expectClose(got, want, "norm forward");

  Vec wantDx(rows * m, 0), wantDs(m, 0), wantDb(m, 0);
  k::normBackward(nc.rms, rows, m, x.data(), scale.data(), eps, dy.data(),
                  wantDx.data(), wantDs.data(),
                  nc.withBias ? wantDb.data() : nullptr);
  Vec dx = garbage(rows * m), ds = garbage(m), db = garbage(m);
  ASSERT_EQ(dev::normBackward(ex, nc.rms, rows, m, x.data(), scale.data(), eps,
                              dy.data(), dx.data(), ds.data(),
                              nc.withBias ? db.data() : nullptr),
            MOE_RT_OK);
  expectClose(dx, wantDx, "norm dx");
  expectClose(ds, wantDs, "norm dscale");
  if (nc.withBias)
    expectClose(db, wantDb, "norm dbias");
  else
    EXPECT_EQ(db, garbage(m)) << "dbias written without a bias";
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, DeviceDenseNorm,
    ::testing::Values(NormCase{false, true}, NormCase{false, false},
                      NormCase{true, false}, NormCase{true, true}),
    [](const ::testing::TestParamInfo<NormCase> &i) {
      return std::string(i.param.rms ? "Rms" : "Layer") +
             (i.param.withBias ? "Bias" : "NoBias");
    });

//===--- embedding --------------------------------------------------------===//

TEST(DeviceDense, SigmoidGateForwardAndBackward) {
  std::mt19937 rng(13);
  const int64_t rows = 9, m = 6;
  Vec x = randomVec(rows * m, rng), w = randomVec(m, rng),
      y = randomVec(rows * m, rng), dout = randomVec(rows * m, rng);
  Vec want(rows * m), got = garbage(rows * m);
  k::sigmoidGateForward(rows, m, x.data(), w.data(), y.data(), want.data());
  CheckedExecutor ex;
  ASSERT_EQ(dev::sigmoidGateForward(ex, rows, m, x.data(), w.data(), y.data(),
                                    got.data()),
            MOE_RT_OK);
  expectClose(got, want, "sigmoid gate");
  Vec wdx(rows * m, 0), wdw(m, 0), wdy(rows * m, 0);
  k::sigmoidGateBackward(rows, m, x.data(), w.data(), y.data(), dout.data(),
                         wdx.data(), wdw.data(), wdy.data());
  Vec dx = garbage(rows * m), dw = garbage(m), dy = garbage(rows * m);
  ASSERT_EQ(dev::sigmoidGateBackward(ex, rows, m, x.data(), w.data(),
                                     y.data(), dout.data(), dx.data(),
                                     dw.data(), dy.data()),
            MOE_RT_OK);
  expectClose(dx, wdx, "sigmoid gate dx");
  expectClose(dw, wdw, "sigmoid gate dw");
  expectClose(dy, wdy, "sigmoid gate dy");
}

TEST(DeviceDense, EmbeddingForwardAndBackward) {
  std::mt19937 rng(31);
  const int64_t vocab = 7, m = 5;
  std::vector<int64_t> ids = {3, 0, 6, 3, 3, 1}; // repeated ids add up
  const int64_t tokens = int64_t(ids.size());
  Vec table = randomVec(vocab * m, rng), dy = randomVec(tokens * m, rng);
  Vec want(tokens * m), got = garbage(tokens * m);
  ASSERT_TRUE(k::embeddingForward(tokens, vocab, m, ids.data(), table.data(),
                                  want.data()));
  CheckedExecutor ex;
  ASSERT_EQ(dev::embeddingForward(ex, tokens, vocab, m, ids.data(),
                                  table.data(), got.data()),
            MOE_RT_OK);
  expectClose(got, want, "embedding forward", 0);

  Vec wantD(vocab * m, 0), gotD = garbage(vocab * m);
  ASSERT_TRUE(k::embeddingBackward(tokens, vocab, m, ids.data(), dy.data(),
                                   wantD.data()));
  ASSERT_EQ(dev::embeddingBackward(ex, tokens, vocab, m, ids.data(), dy.data(),
                                   gotD.data()),
            MOE_RT_OK);
  expectClose(gotD, wantD, "embedding dtable", 1e-6);
}

TEST(DeviceDense, EmbeddingBadIdFailsWithMessage) {
  const int64_t vocab = 7, m = 3;
  Vec table(vocab * m, 1.0f), out(2 * m), dy(2 * m, 1.0f), dtable(vocab * m);
  for (int64_t bad : {int64_t(7), int64_t(-1)}) {
    std::vector<int64_t> ids = {2, bad};
    CheckedExecutor ex;
    EXPECT_EQ(dev::embeddingForward(ex, 2, vocab, m, ids.data(), table.data(),
                                    out.data()),
              MOE_RT_BACKEND_ERROR);
    EXPECT_EQ(ex.status(), MOE_RT_BACKEND_ERROR);
    EXPECT_EQ(ex.message(), "moe_rt_embedding: a token id is outside [0, 7)");

    CheckedExecutor exGrad;
    EXPECT_EQ(dev::embeddingBackward(exGrad, 2, vocab, m, ids.data(),
                                     dy.data(), dtable.data()),
              MOE_RT_BACKEND_ERROR);
    EXPECT_EQ(exGrad.message(),
              "moe_rt_embedding_grad: a token id is outside the table");
  }
}

//===--- moe.bias_add ------------------------------------------------------===//

TEST(DeviceDense, BiasAddIsThePositionBodiesWithOneRow) {
  // On a CUDA stream moe_rt_bias_add(_grad) runs the position-embedding
  // bodies with batch = rows, seq = 1 and the bias as the one-row table
  // (src/api/DenseOps.cpp): those calls on the host executor against the
  // public CPU op, rows x m with a row count that is no multiple of
  // anything (the tensor-parallel attention output, the MoE layer's out).
  std::mt19937 rng(41);
  const int64_t rows = 7, m = 6, n = rows * m;
  Vec x = randomVec(n, rng), bias = randomVec(m, rng), dy = randomVec(n, rng);
  moe_rt_stream s = nullptr;
  ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &s), MOE_RT_OK);
  auto view = [](Vec &v, std::vector<int64_t> shape) {
    moe_rt_tensor t{};
    t.data = v.data();
    t.rank = int32_t(shape.size());
    for (size_t i = 0; i < shape.size(); ++i)
      t.shape[i] = shape[i];
    t.dtype = MOE_RT_F32;
    t.backend = MOE_RT_CPU;
    return t;
  };
  Vec want(n), wantDx(n), wantDb(m);
  moe_rt_tensor tx = view(x, {rows, m}), tb = view(bias, {m}),
                ty = view(want, {rows, m}), tdy = view(dy, {rows, m}),
                tdx = view(wantDx, {rows, m}), tdb = view(wantDb, {m});
  ASSERT_EQ(moe_rt_bias_add(s, &tx, &tb, &ty), MOE_RT_OK);
  ASSERT_EQ(moe_rt_bias_add_grad(s, &tdy, &tdx, &tdb), MOE_RT_OK);
  ASSERT_EQ(moe_rt_stream_synchronize(s, 10.0), MOE_RT_OK);
  moe_rt_stream_destroy(s);
  EXPECT_EQ(want[3 * m + 2], x[3 * m + 2] + bias[2]);

  CheckedExecutor ex;
  Vec got = garbage(n), gotDx = garbage(n), gotDb = garbage(m);
  ASSERT_EQ(dev::positionEmbeddingForward(ex, rows, 1, m, x.data(),
                                          bias.data(), got.data()),
            MOE_RT_OK);
  ASSERT_EQ(dev::positionEmbeddingBackward(ex, rows, 1, 1, m, dy.data(),
                                           gotDx.data(), gotDb.data()),
            MOE_RT_OK);
  expectClose(got, want, "bias_add out", 0);
  expectClose(gotDx, wantDx, "bias_add dx", 0);
  expectClose(gotDb, wantDb, "bias_add dbias");
}

//===--- learned absolute positions ---------------------------------------===//

TEST(DeviceDense, PositionEmbeddingForwardAndBackward) {
  std::mt19937 rng(37);
  // A table with more positions than the sequence: rows past it get no
  // gradient (and must be zeroed, not left as garbage).
  const int64_t batch = 3, seq = 4, rows = 6, m = 5, n = batch * seq * m;
  Vec x = randomVec(n, rng), table = randomVec(rows * m, rng),
      dy = randomVec(n, rng);
  Vec want(n), got = garbage(n);
  k::positionEmbeddingForward(batch, seq, m, x.data(), table.data(),
                              want.data());
  // The kernel itself, by its definition: x[b, t] + table[t].
  EXPECT_EQ(want[(2 * seq + 3) * m + 4], x[(2 * seq + 3) * m + 4] +
                                             table[3 * m + 4]);
  CheckedExecutor ex;
  ASSERT_EQ(dev::positionEmbeddingForward(ex, batch, seq, m, x.data(),
                                          table.data(), got.data()),
            MOE_RT_OK);
  expectClose(got, want, "position embedding forward", 0);

  Vec wantDx(n, 0), wantDt(rows * m, 0), gotDx = garbage(n),
      gotDt = garbage(rows * m);
  k::positionEmbeddingBackward(batch, seq, m, dy.data(), wantDx.data(),
                               wantDt.data());
  EXPECT_FLOAT_EQ(wantDt[1 * m + 2], dy[(0 * seq + 1) * m + 2] +
                                         dy[(1 * seq + 1) * m + 2] +
                                         dy[(2 * seq + 1) * m + 2]);
  ASSERT_EQ(dev::positionEmbeddingBackward(ex, batch, seq, rows, m, dy.data(),
                                           gotDx.data(), gotDt.data()),
            MOE_RT_OK);
  expectClose(gotDx, wantDx, "position embedding dx", 0);
  expectClose(gotDt, wantDt, "position embedding dtable", 0);
  for (int64_t i = seq * m; i < rows * m; ++i)
    ASSERT_EQ(gotDt[i], 0.0f) << "unused table row element " << i;
}

//===--- cross-entropy ----------------------------------------------------===//

TEST(DeviceDense, CrossEntropyForwardAndBackward) {
  std::mt19937 rng(41);
  const int64_t tokens = 6, vocab = 9;
  Vec logits = randomVec(tokens * vocab, rng, 3.0f);
  std::vector<int64_t> labels = {0, 8, 4, 4, 2, 7};
  float want = 0, got = 123.25f;
  ASSERT_TRUE(k::crossEntropyForward(tokens, vocab, logits.data(),
                                     labels.data(), &want));
  CheckedExecutor ex;
  ASSERT_EQ(dev::crossEntropyForward(ex, tokens, vocab, logits.data(),
                                     labels.data(), &got),
            MOE_RT_OK);
  EXPECT_NEAR(got, want, 1e-5 * std::max(1.0f, std::abs(want)));

  const float dloss = 1.75f;
  Vec wantD(tokens * vocab, 0), gotD = garbage(tokens * vocab);
  ASSERT_TRUE(k::crossEntropyBackward(tokens, vocab, logits.data(),
                                      labels.data(), dloss, wantD.data()));
  ASSERT_EQ(dev::crossEntropyBackward(ex, tokens, vocab, logits.data(),
                                      labels.data(), &dloss, gotD.data()),
            MOE_RT_OK);
  expectClose(gotD, wantD, "cross-entropy dlogits", 1e-6);
}

TEST(DeviceDense, CrossEntropyBadLabelFailsWithMessage) {
  const int64_t tokens = 2, vocab = 4;
  Vec logits(tokens * vocab, 0.5f), dlogits(tokens * vocab);
  std::vector<int64_t> labels = {1, 4};
  float loss = 0, dloss = 1;
  CheckedExecutor ex;
  EXPECT_EQ(dev::crossEntropyForward(ex, tokens, vocab, logits.data(),
                                     labels.data(), &loss),
            MOE_RT_BACKEND_ERROR);
  EXPECT_EQ(ex.message(),
            "moe_rt_cross_entropy: a label is outside the vocabulary");
  CheckedExecutor exGrad;
  EXPECT_EQ(dev::crossEntropyBackward(exGrad, tokens, vocab, logits.data(),
                                      labels.data(), &dloss, dlogits.data()),
            MOE_RT_BACKEND_ERROR);
  EXPECT_EQ(exGrad.message(),
            "moe_rt_cross_entropy_grad: a label is outside the vocabulary");
}

//===--- add, sgd, copy ---------------------------------------------------===//

TEST(DeviceDense, AddSgdCopy) {
  std::mt19937 rng(51);
  const int64_t n = 10;
  Vec a = randomVec(n, rng), b = randomVec(n, rng), out = garbage(n);
  CheckedExecutor ex;
  ASSERT_EQ(dev::add(ex, n, a.data(), b.data(), out.data()), MOE_RT_OK);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(out[i], a[i] + b[i]) << i;

  const double lr = 0.1;
  ASSERT_EQ(dev::sgd(ex, n, a.data(), b.data(), lr, out.data()), MOE_RT_OK);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(out[i], a[i] - float(lr) * b[i]) << i; // the CPU op's rounding

  // Element offsets, with an 8-byte dtype too (moe_rt_copy is dtype-blind).
  Vec dst = garbage(n);
  ASSERT_EQ(dev::copyElements(ex, a.data(), 2, dst.data(), 5, 4, sizeof(float)),
            MOE_RT_OK);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(dst[i], i >= 5 && i < 9 ? a[i - 3] : 123.25f) << i;
  std::vector<int64_t> src64 = {1, 2, 3, 4}, dst64(4, -1);
  ASSERT_EQ(dev::copyElements(ex, src64.data(), 1, dst64.data(), 0, 3,
                              sizeof(int64_t)),
            MOE_RT_OK);
  EXPECT_EQ(dst64, (std::vector<int64_t>{2, 3, 4, -1}));
}

//===--- attention --------------------------------------------------------===//

/// heads, kvHeads, causal, rotary, norm (0 none, 1 LayerNorm, 2 RMSNorm),
/// norm bias.
using AttnParam = std::tuple<std::pair<int, int>, bool, bool, int, bool>;

class DeviceDenseAttention : public ::testing::TestWithParam<AttnParam> {};

TEST_P(DeviceDenseAttention, ForwardAndEveryGradient) {
  auto [hk, causal, rotary, norm, withBias] = GetParam();
  k::AttentionShape s;
  s.batch = 3;
  s.seq = 5;
  s.embed = 12;
  s.heads = hk.first;
  s.kvHeads = hk.second;
  s.headDim = 4;
  s.causal = causal;
  s.rotary = rotary;
  s.norm = norm;
  s.eps = 1e-5;
  const int64_t bnm = s.batch * s.seq * s.embed, hd = s.heads * s.headDim,
                kvd = s.kvHeads * s.headDim, m = s.embed,
                perSample = s.heads * s.seq * s.seq;
  std::mt19937 rng(61 + s.heads * 7 + s.kvHeads + causal * 3 + rotary * 5 +
                   norm * 11);
  float ws = 1.0f / std::sqrt(float(m));
  Vec x = randomVec(bnm, rng), wq = randomVec(m * hd, rng, ws),
      wk = randomVec(m * kvd, rng, ws), wv = randomVec(m * kvd, rng, ws),
      wo = randomVec(hd * m, rng, 1.0f / std::sqrt(float(hd))),
      scale = randomVec(m, rng), bias = randomVec(m, rng),
      dout = randomVec(bnm, rng);
  for (float &v : scale)
    v += 1.0f;
  // Without a pre-norm the scale/bias are absent (the op may still receive
  // them; then their gradients are zero: covered below).
  const float *ps = norm ? scale.data() : nullptr;
  const float *pb = norm && withBias ? bias.data() : nullptr;

  Vec want(bnm);
  k::attentionForward(s, x.data(), wq.data(), wk.data(), wv.data(), wo.data(),
                      ps, pb, want.data());
  Vec wdx(bnm, 0), wdq(m * hd, 0), wdk(m * kvd, 0), wdv(m * kvd, 0),
      wdo(hd * m, 0), wds(m, 0), wdb(m, 0);
  k::attentionBackward(s, x.data(), wq.data(), wk.data(), wv.data(), wo.data(),
                       ps, pb, dout.data(), wdx.data(), wdq.data(), wdk.data(),
                       wdv.data(), wdo.data(), ps ? wds.data() : nullptr,
                       pb ? wdb.data() : nullptr);

  // The score workspace bound: the whole batch at once, chunks of 2 and 1
  // samples (3 = 2 + 1 leaves a short last chunk), and a bound below one
  // sample (still one sample per chunk).
  struct Bound {
    int64_t elements, chunks;
  };
  for (Bound bound : {Bound{moe_rt::device::attn::kMaxScoreElements, 1},
                      Bound{2 * perSample, 2}, Bound{perSample, 3},
                      Bound{1, 3}}) {
    std::string at = " (score bound " + std::to_string(bound.elements) + ")";
    Vec got = garbage(bnm);
    CheckedExecutor ex;
    ASSERT_EQ(dev::attentionForward(ex, s, x.data(), wq.data(), wk.data(),
                                    wv.data(), wo.data(), ps, pb, got.data(),
                                    bound.elements),
              MOE_RT_OK);
    expectClose(got, want, "attention out" + at);
    // Launches grow with the chunks, never with the sequence.
    EXPECT_EQ(ex.gemms(), 3 + 2 * s.heads * bound.chunks + 1) << at;

    Vec dx = garbage(bnm), dq = garbage(m * hd), dk = garbage(m * kvd),
        dv = garbage(m * kvd), dO = garbage(hd * m), ds = garbage(m),
        db = garbage(m);
    // Pass the norm gradients whenever the CPU op would take them; with no
    // pre-norm pass them anyway, to check that they come back zero.
    bool passBias = withBias || !norm;
    CheckedExecutor exGrad;
    ASSERT_EQ(dev::attentionBackward(
                  exGrad, s, x.data(), wq.data(), wk.data(), wv.data(),
                  wo.data(), ps, pb, dout.data(), dx.data(), dq.data(),
                  dk.data(), dv.data(), dO.data(), ds.data(),
                  passBias ? db.data() : nullptr, bound.elements),
              MOE_RT_OK);
    expectClose(dx, wdx, "attention dx" + at);
    expectClose(dq, wdq, "attention dwq" + at);
    expectClose(dk, wdk, "attention dwk" + at);
    expectClose(dv, wdv, "attention dwv" + at);
    expectClose(dO, wdo, "attention dwo" + at);
    expectClose(ds, wds, "attention dnorm_scale" + at);
    if (passBias)
      expectClose(db, wdb, "attention dnorm_bias" + at);
  }
}

/// Rotary base and layout, the Q/K/V/O biases (with their gradients) and
/// the Q/K/V clamp (clip_qkv 0.6 cuts about half the projections here):
/// the device ops equal the CPU kernel.
TEST(DeviceDenseAttentionVariants, ThetaLayoutBiasesClip) {
  for (double clip : {0.0, 0.6})
  for (bool interleaved : {false, true})
    for (bool biased : {false, true}) {
      k::AttentionShape s{2, 6, 12, 4, 2, 4, true, true, 2, 1e-5};
      s.theta = interleaved ? 1e6 : 37.0;
      s.interleaved = interleaved;
      s.clip = clip;
      const int64_t bnm = s.batch * s.seq * s.embed,
                    hd = s.heads * s.headDim, kvd = s.kvHeads * s.headDim,
                    m = s.embed;
      std::mt19937 rng(90 + interleaved * 2 + biased);
      Vec x = randomVec(bnm, rng), wq = randomVec(m * hd, rng, 0.3f),
          wk = randomVec(m * kvd, rng, 0.3f), wv = randomVec(m * kvd, rng),
          wo = randomVec(hd * m, rng, 0.3f), scale = randomVec(m, rng),
          bq = randomVec(hd, rng), bk = randomVec(kvd, rng),
          bv = randomVec(kvd, rng), bo = randomVec(m, rng),
          dout = randomVec(bnm, rng);
      k::AttentionBias<float> pb;
      if (biased)
        pb = {bq.data(), bk.data(), bv.data(), bo.data()};
      std::string at = std::string(interleaved ? " interleaved" : " half") +
                       (biased ? " biased" : "") + (clip ? " clipped" : "");
      Vec want(bnm);
      k::attentionForward(s, x.data(), wq.data(), wk.data(), wv.data(),
                          wo.data(), scale.data(), (const float *)nullptr,
                          want.data(), pb);
      Vec wdx(bnm, 0), wdq(m * hd, 0), wdk(m * kvd, 0), wdv(m * kvd, 0),
          wdo(hd * m, 0), wds(m, 0), wbq(hd, 0), wbk(kvd, 0), wbv(kvd, 0),
          wbo(m, 0);
      k::AttentionBiasGrad<float> wdb;
      if (biased)
        wdb = {wbq.data(), wbk.data(), wbv.data(), wbo.data()};
      k::attentionBackward(s, x.data(), wq.data(), wk.data(), wv.data(),
                           wo.data(), scale.data(), (const float *)nullptr,
                           dout.data(), wdx.data(), wdq.data(), wdk.data(),
                           wdv.data(), wdo.data(), wds.data(), (float *)nullptr,
                           pb, wdb);

      Vec got = garbage(bnm);
      CheckedExecutor ex;
      ASSERT_EQ(dev::attentionForward(ex, s, x.data(), wq.data(), wk.data(),
                                      wv.data(), wo.data(), scale.data(),
                                      nullptr, got.data(),
                                      moe_rt::device::attn::kMaxScoreElements,
                                      pb),
                MOE_RT_OK);
      expectClose(got, want, "attention out" + at);
      Vec dx = garbage(bnm), dq = garbage(m * hd), dk = garbage(m * kvd),
          dv = garbage(m * kvd), dO = garbage(hd * m), ds = garbage(m),
          gbq = garbage(hd), gbk = garbage(kvd), gbv = garbage(kvd),
          gbo = garbage(m);
      k::AttentionBiasGrad<float> db;
      if (biased)
        db = {gbq.data(), gbk.data(), gbv.data(), gbo.data()};
      CheckedExecutor exGrad;
      ASSERT_EQ(dev::attentionBackward(
                    exGrad, s, x.data(), wq.data(), wk.data(), wv.data(),
                    wo.data(), scale.data(), nullptr, dout.data(), dx.data(),
                    dq.data(), dk.data(), dv.data(), dO.data(), ds.data(),
                    nullptr, moe_rt::device::attn::kMaxScoreElements, pb, db),
                MOE_RT_OK);
      expectClose(dx, wdx, "attention dx" + at);
      expectClose(dq, wdq, "attention dwq" + at);
      expectClose(dk, wdk, "attention dwk" + at);
      expectClose(dv, wdv, "attention dwv" + at);
      expectClose(dO, wdo, "attention dwo" + at);
      expectClose(ds, wds, "attention dnorm_scale" + at);
      if (biased) {
        expectClose(gbq, wbq, "attention dbq" + at);
        expectClose(gbk, wbk, "attention dbk" + at);
        expectClose(gbv, wbv, "attention dbv" + at);
        expectClose(gbo, wbo, "attention dbo" + at);
      }
    }
}

/// The test name of one attention case (a function: a structured binding
/// inside the macro's lambda would split the macro's arguments).
std::string attnName(const ::testing::TestParamInfo<AttnParam> &i) {
  auto [hk, causal, rotary, norm, withBias] = i.param;
  static const char *norms[] = {"NoNorm", "Layer", "Rms"};
  return "H" + std::to_string(hk.first) + "Kv" + std::to_string(hk.second) +
         (causal ? "Causal" : "Full") + (rotary ? "Rotary" : "NoRope") +
         norms[norm] + (withBias ? "Bias" : "");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DeviceDenseAttention,
    ::testing::Combine(::testing::Values(std::make_pair(4, 4),  // MHA
                                         std::make_pair(4, 2),  // GQA
                                         std::make_pair(6, 2),  // GQA, 3/kv
                                         std::make_pair(3, 1)), // MQA
                       ::testing::Bool(), ::testing::Bool(),
                       ::testing::Values(0, 1, 2), ::testing::Bool()),
    attnName);

//===--- the CUDA entry points --------------------------------------------===//

#ifdef MOE_RT_HAVE_CUDA
// Without a GPU the entry points still link and, handed a CPU stream,
// refuse it before touching a pointer (the pointers here are null).
TEST(DeviceDenseCuda, EntryPointsRefuseACpuStream) {
  moe_rt_stream s = nullptr;
  ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &s), MOE_RT_OK);
  namespace cu = moe_rt::cuda;
  k::AttentionShape shape{2, 3, 4, 2, 1, 2};
  float *f = nullptr;
  const int64_t *ids = nullptr;
  std::vector<std::pair<const char *, moe_rt_status>> calls = {
      {"attention",
       cu::attention(s, shape, f, f, f, f, f, nullptr, nullptr, f)},
      {"attentionGrad", cu::attentionGrad(s, shape, f, f, f, f, f, nullptr,
                                          nullptr, f, f, f, f, f, f, nullptr,
                                          nullptr)},
      {"norm", cu::norm(s, false, 2, 3, 1e-5, f, f, nullptr, f)},
      {"normGrad", cu::normGrad(s, true, 2, 3, 1e-5, f, f, f, f, f, nullptr)},
      {"linear", cu::linear(s, 2, 3, 4, f, f, nullptr, f)},
      {"linearGrad", cu::linearGrad(s, 2, 3, 4, f, f, f, f, f, nullptr)},
      {"embedding", cu::embedding(s, 2, 5, 3, ids, f, f)},
      {"embeddingGrad", cu::embeddingGrad(s, 2, 5, 3, ids, f, f)},
      {"positionEmbedding", cu::positionEmbedding(s, 2, 3, 4, f, f, f)},
      {"positionEmbeddingGrad",
       cu::positionEmbeddingGrad(s, 2, 3, 5, 4, f, f, f)},
      {"crossEntropy", cu::crossEntropy(s, 2, 5, f, ids, f)},
      {"crossEntropyGrad", cu::crossEntropyGrad(s, 2, 5, f, ids, f, f)},
      {"add", cu::add(s, 4, f, f, f)},
      {"copy", cu::copy(s, f, 0, f, 0, 4, sizeof(float))},
      {"sgd", cu::sgd(s, 4, f, f, 0.1, f)}};
  for (auto &[name, st] : calls)
    EXPECT_EQ(st, MOE_RT_INVALID_ARGUMENT) << name;
  // The last call's message: the executor's, not a later one's.
  EXPECT_NE(std::string(moe_rt_last_error()).find("not a CUDA stream"),
            std::string::npos)
      << moe_rt_last_error();
  EXPECT_EQ(cu::embedding(s, 2, 5, 3, ids, f, f), MOE_RT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moe_rt_last_error()).find("not a CUDA stream"),
            std::string::npos)
      << moe_rt_last_error();
  moe_rt_stream_destroy(s);
}
#endif

} // namespace
