//===- PlacementKernelTest.cpp - a placing combine's routes ---------------===//
//
// src/kernels/Placement.h: which rows each rank sends where when NetMoE
// places samples, checked over a whole simulated group: every choice of
// every token is sent exactly once and received exactly once, by the rank
// its sample is placed on, in the slot the placement gives it; and the
// rules a placement must satisfy.

#include "../src/kernels/Placement.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>
#include <vector>

using namespace moe_rt::kernels;

namespace {

constexpr int64_t G = 4, B = 2, N = 3, k = 2, E = 8, El = E / G, T = B * N;

std::vector<int64_t> randomIndices(std::mt19937 &rng) {
  std::vector<int64_t> idx(G * T * k);
  for (int64_t c = 0; c < G * T; ++c) {
    idx[c * k] = rng() % E;
    do
      idx[c * k + 1] = rng() % E;
    while (idx[c * k + 1] == idx[c * k]);
  }
  return idx;
}

PlacedGroup group(const std::vector<int64_t> &idx,
                  const std::vector<int64_t> &place, int64_t rank) {
  return PlacedGroup{G, rank, E, El, T, k, B, /*R=*/G * T, idx.data(),
                     place.data()};
}

TEST(Placement, EveryChoiceTravelsOnceToItsSamplesNewSlot) {
  std::mt19937 rng(7);
  std::vector<int64_t> idx = randomIndices(rng);
  // Samples s = g B + b: a permutation with B per rank.
  std::vector<int64_t> place = {3, 1, 0, 2, 2, 0, 1, 3};
  std::vector<PlacedRoutes> routes(G);
  for (int64_t r = 0; r < G; ++r) {
    ASSERT_EQ(checkPlacement(group(idx, place, r)), "");
    ASSERT_EQ(placedRoutes(group(idx, place, r), routes[r]), "");
  }
  // Pairwise: what r sends to d is what d receives from r.
  for (int64_t r = 0; r < G; ++r)
    for (int64_t d = 0; d < G; ++d)
      EXPECT_EQ(routes[r].sendCount[d], routes[d].recvCount[r]);
  // Every choice sent once, from its expert's rank.
  std::map<int64_t, int> sent;
  for (int64_t r = 0; r < G; ++r)
    for (size_t i = 0; i < routes[r].sendChoice.size(); ++i) {
      int64_t c = routes[r].sendChoice[i];
      ++sent[c];
      EXPECT_EQ(idx[c] / El, r);
      EXPECT_EQ(routes[r].sendRow[i] / (G * T), idx[c] % El);
      EXPECT_EQ(routes[r].sendSlot[i], c % k);
    }
  EXPECT_EQ(int64_t(sent.size()), G * T * k);
  // Every rank receives each of its T tokens' k choices once, and the
  // tokens are its new samples': rank 0 holds samples 2 and 5, in order.
  for (int64_t r = 0; r < G; ++r) {
    std::map<std::pair<int64_t, int64_t>, int> got;
    for (size_t i = 0; i < routes[r].recvToken.size(); ++i)
      ++got[{routes[r].recvToken[i], routes[r].recvSlot[i]}];
    EXPECT_EQ(int64_t(got.size()), T * k);
    for (auto &[key, n] : got)
      EXPECT_EQ(n, 1);
  }
  // Rank 0's first token is sample 2's (rank 1, b 0) first token: its
  // choices are the ones of (g 1, t 0).
  std::vector<int64_t> fromSample2;
  for (size_t i = 0; i < routes[0].recvToken.size(); ++i)
    if (routes[0].recvToken[i] == 0)
      fromSample2.push_back(routes[0].recvSlot[i]);
  EXPECT_EQ(fromSample2.size(), size_t(k));
}

TEST(Placement, RefusesAPlacementThatBreaksTheBalance) {
  std::mt19937 rng(1);
  std::vector<int64_t> idx = randomIndices(rng);
  std::vector<int64_t> unbalanced = {0, 0, 0, 1, 2, 2, 3, 3};
  EXPECT_EQ(checkPlacement(group(idx, unbalanced, 0)),
            "rank 0 would receive 3 samples, not 2 (a placement keeps B per "
            "rank)");
  std::vector<int64_t> outside = {0, 0, 1, 1, 2, 2, 3, 4};
  EXPECT_EQ(checkPlacement(group(idx, outside, 0)),
            "sample 7 is placed on rank 4, the group has 4 ranks");
}

TEST(Placement, RefusesRowsOverTheBound) {
  std::vector<int64_t> idx(G * T * k);
  for (int64_t c = 0; c < G * T; ++c) {
    idx[c * k] = 0; // every token's first choice: expert 0
    idx[c * k + 1] = 1;
  }
  std::vector<int64_t> place = {0, 0, 1, 1, 2, 2, 3, 3};
  PlacedGroup g = group(idx, place, 0);
  g.R = 5;
  PlacedRoutes routes;
  EXPECT_EQ(placedRoutes(g, routes),
            "expert 0 receives more than its 5 rows");
}

} // namespace
