//===- ExpertChoiceTest.cpp - expert-choice gate, dispatch and combine ----===//
//
// kernels/ExpertChoice.h and moe_rt_gate(MOE_RT_GATE_EXPERT_CHOICE): a
// known answer worked by hand (ties to the lower token), the op against a
// brute-force top-C, finite differences of the gate's vjp and of combine,
// the dispatch layout's adjoint, a dispatch -> identity experts -> combine
// round trip, and the argument checks. (The ops' all-to-all path needs a
// group: test/Runtime/gate-expert-choice.test runs it on 2 MPI ranks.)
//
//===----------------------------------------------------------------------===//

#include "moe_rt/ops.h"

#include "TestTensor.h"

#include "kernels/ExpertChoice.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace {

using moe_rt_test::Tensor;
using namespace moe_rt::kernels;
using Vec = std::vector<double>;

Vec random(size_t n, std::mt19937 &rng, double scale = 1.0) {
  return moe_rt_test::randomDoubles(n, rng, scale);
}

using moe_rt_test::checkCentralDifferences;
using moe_rt_test::fillRandom;

TEST(ExpertChoiceKernels, KnownAnswerWithTies) {
  // 4 tokens, 2 experts, logits chosen so that S[:, 0] =
  // softmax([a, 0])_0 for a = 1, 2, 1, -1: expert 0 ranks tokens 1, then
  // 0 and 2 (a tie: token 0 first), then 3. Expert 1 ranks them reversed:
  // 3, then 0 and 2 (tie: token 0), then 1.
  Vec logits = {1, 0, 2, 0, 1, 0, -1, 0};
  std::vector<int64_t> idx(4), counts(2);
  Vec w(4);
  expertChoiceTopC(4, 2, 2, logits.data(), idx.data(), w.data(), counts.data());
  EXPECT_EQ(idx, (std::vector<int64_t>{1, 0, 3, 0}));
  auto s0 = [](double a) { return 1 / (1 + std::exp(-a)); };
  EXPECT_NEAR(w[0], s0(2), 1e-12);
  EXPECT_NEAR(w[1], s0(1), 1e-12);
  EXPECT_NEAR(w[2], 1 - s0(-1), 1e-12);
  EXPECT_NEAR(w[3], 1 - s0(1), 1e-12);
  EXPECT_EQ(counts, (std::vector<int64_t>{2, 2}));
  // C = T: every expert takes every token, best first.
  std::vector<int64_t> all(8);
  Vec wa(8);
  expertChoiceTopC(4, 2, 4, logits.data(), all.data(), wa.data(),
                   counts.data());
  EXPECT_EQ(all, (std::vector<int64_t>{1, 0, 2, 3, 3, 0, 2, 1}));
  EXPECT_EQ(counts, (std::vector<int64_t>{4, 4}));
}

TEST(ExpertChoiceKernels, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(5);
  const int64_t tokens = 7, experts = 3, capacity = 3;
  Vec logits = random(tokens * experts, rng),
      c = random(experts * capacity, rng);
  std::vector<int64_t> idx(experts * capacity), counts(experts);
  Vec w(experts * capacity), dl(tokens * experts, 0.0);
  expertChoiceTopC(tokens, experts, capacity, logits.data(), idx.data(),
                   w.data(), counts.data());
  expertChoiceBackward(tokens, experts, capacity, logits.data(), idx.data(),
                       c.data(), dl.data());
  auto objective = [&](const Vec &l, std::vector<int64_t> &sel) {
    Vec ww(experts * capacity);
    expertChoiceTopC(tokens, experts, capacity, l.data(), sel.data(), ww.data(),
                     counts.data());
    double sum = 0;
    for (size_t i = 0; i < ww.size(); ++i)
      sum += ww[i] * c[i];
    return sum;
  };
  int checked = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    Vec a = logits, b = logits;
    a[i] += 1e-6;
    b[i] -= 1e-6;
    std::vector<int64_t> sa(idx.size()), sb(idx.size());
    double fd = (objective(a, sa) - objective(b, sb)) / 2e-6;
    if (sa != idx || sb != idx)
      continue; // the selection flipped: not differentiable here
    ++checked;
    EXPECT_NEAR(dl[i], fd, 1e-6) << "logit " << i;
  }
  EXPECT_EQ(checked, int(logits.size()));
  // Tokens no expert picked get no gradient at all.
  std::vector<bool> picked(tokens, false);
  for (int64_t t : idx)
    picked[t] = true;
  for (int64_t t = 0; t < tokens; ++t)
    if (!picked[t])
      for (int64_t e = 0; e < experts; ++e)
        EXPECT_EQ(dl[t * experts + e], 0.0);
}

TEST(ExpertChoiceKernels, DispatchAndCombineAreAdjoints) {
  std::mt19937 rng(7);
  const int64_t tokens = 6, experts = 3, capacity = 4, m = 3;
  Vec logits = random(tokens * experts, rng), x = random(tokens * m, rng);
  std::vector<int64_t> idx(experts * capacity), counts(experts);
  Vec w(experts * capacity);
  expertChoiceTopC(tokens, experts, capacity, logits.data(), idx.data(),
                   w.data(), counts.data());
  idx[5] = -1; // an empty slot is skipped both ways
  // <dispatch(x), s> == <x, dispatch^T(s)>.
  Vec s = random(experts * capacity * m, rng), send(s.size(), 7.0),
      back(x.size(), 0.0);
  ecDispatchLayout(experts, capacity, m, idx.data(), x.data(), send.data());
  for (int64_t i = 0; i < m; ++i)
    EXPECT_EQ(send[5 * m + i], 0.0);
  ecDispatchLayoutBackward(experts, capacity, m, idx.data(), s.data(),
                           back.data());
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < s.size(); ++i)
    lhs += send[i] * s[i];
  for (size_t i = 0; i < x.size(); ++i)
    rhs += x[i] * back[i];
  EXPECT_NEAR(lhs, rhs, 1e-10);
  // Combine's gradients by central differences of <combine(w, recv), dy>.
  Vec recv = random(experts * capacity * m, rng), dy = random(tokens * m, rng);
  Vec drecv(recv.size(), 0.0), dw(w.size(), 0.0);
  ecCombineGatherBackward(experts, capacity, m, idx.data(), w.data(),
                          recv.data(), dy.data(), drecv.data(), dw.data());
  auto loss = [&](const Vec &ww, const Vec &rr) {
    Vec y(tokens * m);
    ecCombineGather(tokens, experts, capacity, m, idx.data(), ww.data(),
                    rr.data(), y.data());
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i)
      l += y[i] * dy[i];
    return l;
  };
  double norm = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    Vec a = w, b = w;
    a[i] += 1e-6;
    b[i] -= 1e-6;
    ASSERT_NEAR(dw[i], (loss(a, recv) - loss(b, recv)) / 2e-6, 1e-6);
    norm += std::fabs(dw[i]);
  }
  for (size_t i = 0; i < recv.size(); ++i) {
    Vec a = recv, b = recv;
    a[i] += 1e-6;
    b[i] -= 1e-6;
    ASSERT_NEAR(drecv[i], (loss(w, a) - loss(w, b)) / 2e-6, 1e-6);
  }
  EXPECT_GT(norm, 1e-3);
  EXPECT_EQ(dw[5], 0.0);
}

// On one rank with identity experts, dispatch + combine gives token t
// (sum of the weights of the slots that picked t) x[t]: 0 when no expert
// picked it, and several experts' weights when several did.
TEST(ExpertChoiceKernels, RoundTripSumsTheWeightsOfEveryPick) {
  std::mt19937 rng(9);
  const int64_t tokens = 10, experts = 4, m = 2;
  for (int64_t capacity : {1, 3, 10}) {
    Vec logits = random(tokens * experts, rng), x = random(tokens * m, rng);
    std::vector<int64_t> idx(experts * capacity), counts(experts);
    Vec w(experts * capacity);
    expertChoiceTopC(tokens, experts, capacity, logits.data(), idx.data(),
                     w.data(), counts.data());
    Vec send(experts * capacity * m), y(tokens * m);
    ecDispatchLayout(experts, capacity, m, idx.data(), x.data(), send.data());
    ecCombineGather(tokens, experts, capacity, m, idx.data(), w.data(),
                    send.data(), y.data());
    int unpicked = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      double kept = 0;
      for (int64_t s = 0; s < experts * capacity; ++s)
        kept += idx[s] == t ? w[s] : 0.0;
      unpicked += kept == 0;
      for (int64_t i = 0; i < m; ++i)
        ASSERT_NEAR(y[t * m + i], kept * x[t * m + i], 1e-12);
    }
    if (capacity == 1)
      EXPECT_GT(unpicked, 0); // 4 picks of 10 tokens leave some out
    if (capacity == tokens)
      EXPECT_EQ(unpicked, 0);
  }
}

TEST(ExpertChoiceKernels, FirstBadIndex) {
  std::vector<int64_t> ok = {0, 3, -1, 2}, high = {0, 4, 1, 1},
                       low = {0, 1, -2, 1};
  EXPECT_EQ(ecFirstBadIndex(4, ok.data(), 4), -1);
  EXPECT_EQ(ecFirstBadIndex(4, high.data(), 4), 1);
  EXPECT_EQ(ecFirstBadIndex(4, low.data(), 4), 2);
}

struct ExpertChoiceOpTest : moe_rt_test::CpuStreamTest {};

// moe_rt_gate on x (B x N x M) = 2 x 5 x 3 against a brute force: the
// token ids are flattened over B x N and each expert's picks are its C
// most probable tokens, best first.
TEST_F(ExpertChoiceOpTest, GateMatchesBruteForce) {
  const int64_t b = 2, n = 5, m = 3, e = 4, cap = 3, t = b * n;
  Tensor x({b, n, m}), w({m, e});
  fillRandom(x, 21);
  fillRandom(w, 22);
  Tensor idx({e, cap}, MOE_RT_I64), wts({e, cap}), counts({e}, MOE_RT_I64);
  ASSERT_EQ(moe_rt_gate(s, MOE_RT_GATE_EXPERT_CHOICE, 2, 0, 0, 1.0, &x, &w,
                        nullptr, &idx, &wts, &counts),
            MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  // Probabilities in double.
  std::vector<Vec> p(t, Vec(e));
  for (int64_t i = 0; i < t; ++i) {
    double mx = -1e300, sum = 0;
    Vec l(e, 0.0);
    for (int64_t j = 0; j < e; ++j) {
      for (int64_t q = 0; q < m; ++q)
        l[j] += double(x.f()[i * m + q]) * w.f()[q * e + j];
      mx = std::max(mx, l[j]);
    }
    for (int64_t j = 0; j < e; ++j)
      sum += p[i][j] = std::exp(l[j] - mx);
    for (double &v : p[i])
      v /= sum;
  }
  for (int64_t j = 0; j < e; ++j) {
    std::vector<int64_t> order(t);
    for (int64_t i = 0; i < t; ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t u, int64_t v) { return p[u][j] > p[v][j]; });
    EXPECT_EQ(counts.i()[j], cap);
    for (int64_t c = 0; c < cap; ++c) {
      EXPECT_EQ(idx.i()[j * cap + c], order[c]) << "expert " << j;
      EXPECT_NEAR(wts.f()[j * cap + c], p[order[c]][j], 1e-5);
    }
  }
}

/// Finite differences of sum(weights ⊙ c) against moe_rt_gate_grad, for x
/// and w, skipping the points where a step flips the selection.
TEST_F(ExpertChoiceOpTest, GateGradientMatchesFiniteDifferences) {
  const int64_t m = 4, e = 3, cap = 4;
  Tensor x({2, 4, m}), w({m, e}), c({e, cap});
  fillRandom(x, 31);
  fillRandom(w, 32);
  fillRandom(c, 33);
  Tensor idx({e, cap}, MOE_RT_I64), wts({e, cap}), counts({e}, MOE_RT_I64);
  auto objective = [&]() {
    EXPECT_EQ(moe_rt_gate(s, MOE_RT_GATE_EXPERT_CHOICE, 1, 0, 0, 1.0, &x, &w,
                          nullptr, &idx, &wts, &counts),
              MOE_RT_OK);
    EXPECT_EQ(sync(), MOE_RT_OK);
    double sum = 0;
    for (int64_t i = 0; i < wts.n(); ++i)
      sum += double(wts.f()[i]) * c.f()[i];
    return sum;
  };
  Tensor dx({2, 4, m}), dw({m, e});
  std::fill(dx.f(), dx.f() + dx.n(), 99.0f); // overwritten, not accumulated
  ASSERT_EQ(moe_rt_gate_grad(s, MOE_RT_GATE_EXPERT_CHOICE, 1, 0, 0, 1.0, &x, &w,
                             nullptr, &c, &dx, &dw, nullptr),
            MOE_RT_OK);
  ASSERT_EQ(sync(), MOE_RT_OK);
  int checked = checkCentralDifferences(x, dx, idx, objective, "x") +
                checkCentralDifferences(w, dw, idx, objective, "w");
  int64_t total = x.n() + w.n();
  EXPECT_GT(checked, total * 3 / 4); // most points were checked
  double norm = 0;
  for (int64_t i = 0; i < dw.n(); ++i)
    norm += std::fabs(dw.f()[i]);
  EXPECT_GT(norm, 1e-3);
}

TEST_F(ExpertChoiceOpTest, ArgumentChecks) {
  const auto EC = MOE_RT_GATE_EXPERT_CHOICE;
  Tensor x({2, 3}), w({3, 4}), a({3, 4}), idx({4, 2}, MOE_RT_I64), wts({4, 2}),
      counts({4}, MOE_RT_I64);
  auto refused = [&](moe_rt_status st, const char *what) {
    EXPECT_EQ(st, MOE_RT_INVALID_ARGUMENT) << what;
    EXPECT_NE(std::string(moe_rt_last_error()).find(what), std::string::npos)
        << moe_rt_last_error();
  };
  // The well-formed call is accepted (and runs): E x C = 4 x 2 on T = 2.
  EXPECT_EQ(
      moe_rt_gate(s, EC, 1, 0, 0, 1.0, &x, &w, nullptr, &idx, &wts, &counts),
      MOE_RT_OK);
  EXPECT_EQ(sync(), MOE_RT_OK);
  refused(
      moe_rt_gate(s, EC, 1, 1, 0, 1.0, &x, &w, nullptr, &idx, &wts, &counts),
      "expert_choice takes no normalize");
  refused(moe_rt_gate(s, EC, 1, 0, 0, 1.0, &x, &w, &a, &idx, &wts, &counts),
          "takes no aux weight");
  Tensor tc({2, 3, 1}, MOE_RT_I64); // token-choice shaped indices
  refused(moe_rt_gate(s, EC, 1, 0, 0, 1.0, &x, &w, nullptr, &tc, &wts, &counts),
          "indices must be E x C");
  Tensor big({4, 3}, MOE_RT_I64), bigW({4, 3}); // C = 3 > T = 2
  refused(
      moe_rt_gate(s, EC, 1, 0, 0, 1.0, &x, &w, nullptr, &big, &bigW, &counts),
      "must be in [1, T], T = 2 tokens");
  Tensor smallW({4, 1});
  refused(
      moe_rt_gate(s, EC, 1, 0, 0, 1.0, &x, &w, nullptr, &idx, &smallW, &counts),
      "weights must have 8 elements");
  Tensor dx({2, 3}), dw({3, 4}), da({3, 4}), dflat({8});
  refused(moe_rt_gate_grad(s, EC, 1, 0, 0, 1.0, &x, &w, nullptr, &dflat, &dx,
                           &dw, nullptr),
          "dweights must be E x C");
  refused(moe_rt_gate_grad(s, EC, 1, 0, 0, 1.0, &x, &w, nullptr, &wts, &dx, &dw,
                           &da),
          "takes no daux");
  // Routing without a group is refused before anything is queued (the
  // E x C path itself runs under MPI in gate-expert-choice.test).
  Tensor routed({4, 2, 3});
  EXPECT_EQ(moe_rt_dispatch(s, nullptr, 4, 2, &x, &idx, &routed),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(sync(), MOE_RT_OK); // refused calls queue nothing
}

} // namespace
