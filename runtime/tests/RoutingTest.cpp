//===- RoutingTest.cpp - gate, capacity slots, dispatch and combine -------===//

#include "kernels/Routing.h"

#include "TestTensor.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

using namespace moe_rt::kernels;

namespace {

using Vec = std::vector<double>;

Vec random(size_t n, std::mt19937 &rng, double scale = 1.0) {
  return moe_rt_test::randomDoubles(n, rng, scale);
}

TEST(Routing, SoftmaxTopKKnownAnswer) {
  // One token, logits ln(1), ln(2), ln(3), ln(4): p = .1 .2 .3 .4.
  Vec logits = {0, std::log(2.0), std::log(3.0), std::log(4.0)};
  int64_t idx[2], counts[4];
  Vec w(2);
  softmaxTopK(int64_t(1), int64_t(4), int64_t(2), false, logits.data(), idx,
              w.data(), counts);
  EXPECT_EQ(idx[0], 3);
  EXPECT_EQ(idx[1], 2);
  EXPECT_NEAR(w[0], 0.4, 1e-12);
  EXPECT_NEAR(w[1], 0.3, 1e-12);
  EXPECT_EQ(counts[3], 1);
  EXPECT_EQ(counts[0], 0);
  softmaxTopK(int64_t(1), int64_t(4), int64_t(2), true, logits.data(), idx,
              w.data(), counts);
  EXPECT_NEAR(w[0], 4.0 / 7, 1e-12); // Mixtral: softmax over the kept logits
  EXPECT_NEAR(w[1], 3.0 / 7, 1e-12);
}

TEST(Routing, SoftmaxTopKGradient) {
  for (bool normalize : {false, true}) {
    std::mt19937 rng(normalize ? 8 : 7);
    int64_t tokens = 4, experts = 5, k = 2;
    Vec logits = random(tokens * experts, rng), c = random(tokens * k, rng);
    std::vector<int64_t> idx(tokens * k), counts(experts);
    Vec w(tokens * k), dlogits(logits.size());
    softmaxTopK(tokens, experts, k, normalize, logits.data(), idx.data(),
                w.data(), counts.data());
    softmaxTopKBackward(tokens, experts, k, normalize, logits.data(),
                        idx.data(), c.data(), dlogits.data());
    // Central differences with the selection held fixed (it is piecewise
    // constant; random logits keep away from ties).
    for (size_t i = 0; i < logits.size(); ++i) {
      auto eval = [&](double delta) {
        Vec l = logits;
        l[i] += delta;
        std::vector<int64_t> idx2(tokens * k), cnt(experts);
        Vec w2(tokens * k);
        softmaxTopK(tokens, experts, k, normalize, l.data(), idx2.data(),
                    w2.data(), cnt.data());
        EXPECT_EQ(idx2, idx) << "selection changed; pick another seed";
        double s = 0;
        for (size_t j = 0; j < w2.size(); ++j)
          s += c[j] * w2[j];
        return s;
      };
      double numeric = (eval(1e-6) - eval(-1e-6)) / 2e-6;
      ASSERT_NEAR(dlogits[i], numeric, 1e-6) << "logit " << i;
    }
  }
}

// GShard order: first choices before second choices; overflow dropped.
TEST(Routing, CapacitySlotsDropInGShardOrder) {
  // 3 tokens, k = 2, capacity 2. Expert 0 is everyone's first choice.
  std::vector<int64_t> idx = {0, 1, 0, 2, 0, 1};
  std::vector<int64_t> slots(6);
  routeTokens(3, 3, 2, 2, idx.data(), slots.data());
  EXPECT_EQ(slots, (std::vector<int64_t>{0, 0, 1, 0, -1, 1}));
}

// Brute force: with identity experts, on one rank, dispatch + combine gives
// y[t] = (sum of kept weights) x[t]; every slot holds the right token.
TEST(Routing, DispatchCombineRoundTripOnOneRank) {
  std::mt19937 rng(9);
  int64_t tokens = 12, experts = 4, k = 2, m = 3;
  for (int64_t capacity : {2, 4, 6}) {
    Vec x = random(tokens * m, rng), logits = random(tokens * experts, rng);
    std::vector<int64_t> idx(tokens * k), counts(experts), slots(tokens * k);
    Vec w(tokens * k);
    softmaxTopK(tokens, experts, k, true, logits.data(), idx.data(), w.data(),
                counts.data());
    routeTokens(tokens, experts, k, capacity, idx.data(), slots.data());
    Vec send(experts * capacity * m), y(tokens * m);
    dispatchLayout(tokens, k, experts, capacity, m, idx.data(), slots.data(),
                   x.data(), send.data());
    combineGather(tokens, k, capacity, m, idx.data(), slots.data(), w.data(),
                  send.data(), y.data());
    for (int64_t t = 0; t < tokens; ++t) {
      double kept = 0;
      for (int64_t j = 0; j < k; ++j)
        if (slots[t * k + j] >= 0)
          kept += w[t * k + j];
      for (int64_t i = 0; i < m; ++i)
        ASSERT_NEAR(y[t * m + i], kept * x[t * m + i], 1e-12);
    }
  }
}

TEST(Routing, DispatchAndCombineAreAdjoints) {
  std::mt19937 rng(11);
  int64_t tokens = 10, experts = 3, k = 2, m = 4, capacity = 5;
  Vec x = random(tokens * m, rng), logits = random(tokens * experts, rng);
  std::vector<int64_t> idx(tokens * k), counts(experts), slots(tokens * k);
  Vec w(tokens * k);
  softmaxTopK(tokens, experts, k, false, logits.data(), idx.data(), w.data(),
              counts.data());
  routeTokens(tokens, experts, k, capacity, idx.data(), slots.data());
  // <dispatch(x), s> == <x, dispatch^T(s)>.
  Vec s = random(experts * capacity * m, rng), send(s.size()), back(x.size());
  dispatchLayout(tokens, k, experts, capacity, m, idx.data(), slots.data(),
                 x.data(), send.data());
  dispatchLayoutBackward(tokens, k, capacity, m, idx.data(), slots.data(),
                         s.data(), back.data());
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < s.size(); ++i)
    lhs += send[i] * s[i];
  for (size_t i = 0; i < x.size(); ++i)
    rhs += x[i] * back[i];
  EXPECT_NEAR(lhs, rhs, 1e-10);
  // Combine's gradients by central differences.
  Vec recv = random(experts * capacity * m, rng), dy = random(tokens * m, rng);
  Vec drecv(recv.size()), dw(w.size());
  combineGatherBackward(tokens, k, capacity, m, idx.data(), slots.data(),
                        w.data(), recv.data(), dy.data(), drecv.data(),
                        dw.data());
  auto loss = [&](const Vec &ww, const Vec &rr) {
    Vec y(tokens * m);
    combineGather(tokens, k, capacity, m, idx.data(), slots.data(), ww.data(),
                  rr.data(), y.data());
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i)
      l += y[i] * dy[i];
    return l;
  };
  for (size_t i = 0; i < w.size(); ++i) {
    Vec a = w, b = w;
    a[i] += 1e-6;
    b[i] -= 1e-6;
    ASSERT_NEAR(dw[i], (loss(a, recv) - loss(b, recv)) / 2e-6, 1e-6);
  }
  for (size_t i = 0; i < recv.size(); ++i) {
    Vec a = recv, b = recv;
    a[i] += 1e-6;
    b[i] -= 1e-6;
    ASSERT_NEAR(drecv[i], (loss(w, a) - loss(w, b)) / 2e-6, 1e-6);
  }
}

TEST(Routing, TransposesAreInverses) {
  int64_t ranks = 3, local = 2, capacity = 2, m = 2;
  Vec in(ranks * local * capacity * m), mid(in.size()), out(in.size());
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = double(i);
  toExpertMajor(ranks, local, capacity, m, in.data(), mid.data());
  // Local expert 1 of rank 2's block lands at [1][2].
  EXPECT_EQ(mid[(1 * ranks + 2) * capacity * m],
            in[(2 * local + 1) * capacity * m]);
  toRankMajor(ranks, local, capacity, m, mid.data(), out.data());
  EXPECT_EQ(out, in);
}

} // namespace
