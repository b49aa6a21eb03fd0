//===- SamplePlacementTest.cpp - NetMoE's two stages, checked exactly -----===//

#include "TestSupport.h"

#include "moe_rt/sample_placement.h"
#include "moe_rt/synthetic_routing.h"

#include <gtest/gtest.h>

using namespace moe_rt::planning;
using namespace planning_test;

namespace {

struct Instance {
  Grid grid;
  CountMatrix gather, next;
  std::vector<int> gatherExperts, nextExperts;
};

/// The inter- and intra-node tokens of the gather plus the next scatter
/// at `rank`, pair by pair (Eq. 3-4), independent of the library's Eq. 8.
void objective(const Instance &x, const std::vector<int> &rank, bool withNext,
               int64_t &inter, int64_t &intra) {
  volumes(x.gather, rank, x.gatherExperts, x.grid, inter, intra);
  if (!withNext)
    return;
  int64_t i2, a2;
  volumes(x.next, rank, x.nextExperts, x.grid, i2, a2);
  inter += i2;
  intra += a2;
}

SamplePlacement plan(const Instance &x, bool withNext,
                     AssignmentForm form = AssignmentForm::Transportation) {
  SamplePlacementProblem p;
  p.grid = x.grid;
  p.form = form;
  p.gather = {&x.gather, &x.gatherExperts};
  if (withNext)
    p.nextScatter = {&x.next, &x.nextExperts};
  SamplePlacement out;
  std::string e = planSamplePlacement(p, out);
  EXPECT_EQ(e, "");
  return out;
}

Instance randomInstance(Grid g, int samples, int experts, std::mt19937_64 &rng) {
  Instance x;
  x.grid = g;
  x.gather = randomCounts(samples, experts, 6, 2, rng);
  x.next = randomCounts(samples, experts, 6, 2, rng);
  for (int e = 0; e < experts; ++e) {
    // Random (unbalanced) expert placements: the planner must not assume
    // E/J experts per rank in order.
    x.gatherExperts.push_back(int(rng() % g.ranks()));
    x.nextExperts.push_back(int(rng() % g.ranks()));
  }
  return x;
}

} // namespace

// NetMoE Fig. 2 and Fig. 4 (counts reconstructed in RoutingCountsTest):
// stage 1 puts samples 1 and 3 on node 0 (Fig. 2c: SmpDev = [3,1,2,0]
// up to ranks within a node), stage 2 then swaps samples 0 and 2 inside
// node 1 (Fig. 4b).
TEST(SamplePlacement, PaperFigures2And4) {
  Instance x;
  x.grid = Grid{2, 2};
  x.gather = CountMatrix(4, 4);
  const uint32_t rows[4][4] = {
      {0, 1, 3, 0}, {1, 1, 1, 1}, {0, 0, 3, 1}, {3, 1, 0, 0}};
  for (int i = 0; i < 4; ++i)
    for (int e = 0; e < 4; ++e)
      x.gather.at(i, e) = rows[i][e];
  x.gatherExperts = {0, 1, 2, 3};
  SamplePlacement p = plan(x, false);
  EXPECT_EQ(p.sampleRank, (std::vector<int>{2, 1, 3, 0}));
  EXPECT_EQ(p.interNodeTokens, 3); // node 0 sends 2, node 1 sends 1
  int64_t inter, intra;
  objective(x, p.sampleRank, false, inter, intra);
  EXPECT_EQ(inter, p.interNodeTokens);
  EXPECT_EQ(intra, p.intraNodeTokens);
}

// Stage 1 reaches the minimum inter-node volume over EVERY balanced
// placement; stage 2 the minimum intra-node volume over every placement
// with stage 1's node assignment. Both forms, with and without the next
// block's term.
TEST(SamplePlacement, StagesAreOptimalByBruteForce) {
  std::mt19937_64 rng(5);
  struct Case {
    Grid grid;
    int samples, experts;
  };
  std::vector<Case> cases = {{{2, 2}, 8, 4},  {{2, 2}, 8, 8}, {{3, 1}, 6, 6},
                             {{1, 3}, 6, 5},  {{2, 1}, 6, 3}, {{4, 1}, 8, 4},
                             {{2, 3}, 6, 7}};
  for (const Case &c : cases)
    for (int trial = 0; trial < 6; ++trial)
      for (bool withNext : {false, true}) {
        Instance x = randomInstance(c.grid, c.samples, c.experts, rng);
        int perRank = c.samples / c.grid.ranks();
        int64_t bestInter = INT64_MAX;
        forEachBalanced(c.samples, std::vector<int>(c.grid.ranks(), perRank),
                        [&](const std::vector<int> &rank) {
                          int64_t a, b;
                          objective(x, rank, withNext, a, b);
                          bestInter = std::min(bestInter, a);
                        });
        for (AssignmentForm form :
             {AssignmentForm::Transportation, AssignmentForm::Expanded}) {
          SamplePlacement p = plan(x, withNext, form);
          std::vector<int> held(c.grid.ranks(), 0);
          for (int r : p.sampleRank)
            ++held[r];
          EXPECT_EQ(held, std::vector<int>(c.grid.ranks(), perRank));
          int64_t inter, intra;
          objective(x, p.sampleRank, withNext, inter, intra);
          EXPECT_EQ(inter, p.interNodeTokens);
          EXPECT_EQ(intra, p.intraNodeTokens);
          // Stage 2 within stage 1's nodes (stage 1 may have several
          // optima; each form's own choice is what stage 2 works in).
          int64_t bestIntra = INT64_MAX;
          forEachBalanced(
              c.samples, std::vector<int>(c.grid.ranks(), perRank),
              [&](const std::vector<int> &rank) {
                for (int i = 0; i < c.samples; ++i)
                  if (x.grid.nodeOf(rank[i]) != x.grid.nodeOf(p.sampleRank[i]))
                    return;
                int64_t a, b;
                objective(x, rank, withNext, a, b);
                bestIntra = std::min(bestIntra, b);
              });
          std::string what = "grid " + std::to_string(c.grid.nodes) + "x" +
                             std::to_string(c.grid.ranksPerNode) + " trial " +
                             std::to_string(trial) + " next " +
                             std::to_string(withNext) + " form " +
                             std::to_string(int(form));
          EXPECT_EQ(inter, bestInter) << what;
          EXPECT_EQ(intra, bestIntra) << what;
        }
      }
}

// Two nodes: stage 1 equals the paper's sorting solution on instances too
// large to enumerate (the c_{i,0} - c_{i,1} order, computed here from the
// counts directly).
TEST(SamplePlacement, TwoNodesMatchSorting) {
  std::mt19937_64 rng(9);
  for (int samples : {16, 64, 256}) {
    Instance x = randomInstance(Grid{2, 4}, samples, 16, rng);
    SamplePlacement p = plan(x, true);
    std::vector<std::pair<int64_t, int>> diff;
    for (int i = 0; i < samples; ++i) {
      // Inter-node tokens of sample i on node 0 minus on node 1.
      int64_t d = 0;
      for (const auto &[num, ex] :
           {std::make_pair(&x.gather, &x.gatherExperts),
            std::make_pair(&x.next, &x.nextExperts)})
        for (int e = 0; e < num->experts; ++e)
          d += (x.grid.nodeOf((*ex)[e]) == 1 ? 1 : -1) * int64_t(num->at(i, e));
      diff.push_back({d, i});
    }
    std::sort(diff.begin(), diff.end());
    std::vector<int> sortedRank(samples);
    for (int k = 0; k < samples; ++k)
      sortedRank[diff[k].second] = k < samples / 2 ? 0 : 4;
    int64_t sortedInter, intra, inter;
    objective(x, sortedRank, true, sortedInter, intra);
    objective(x, p.sampleRank, true, inter, intra);
    EXPECT_EQ(inter, sortedInter) << samples;
  }
}

// A prediction that gives every sample the same row (global expert
// frequencies) adds the same cost to every balanced placement: the plan's
// gather volume cannot improve on the gather-only plan.
TEST(SamplePlacement, SampleBlindPredictionChangesNothing) {
  std::mt19937_64 rng(13);
  Instance x = randomInstance(Grid{2, 2}, 8, 8, rng);
  for (int i = 0; i < x.next.rows; ++i)
    for (int e = 0; e < x.next.experts; ++e)
      x.next.at(i, e) = uint32_t(e + 1);
  SamplePlacement only = plan(x, false), with = plan(x, true);
  int64_t a, b, c, d;
  objective(x, only.sampleRank, false, a, b);
  objective(x, with.sampleRank, false, c, d);
  EXPECT_EQ(a, c);
}

// On a synthetic trace with locality, the planned gather never sends more
// across nodes than leaving samples where they are (a feasible placement).
TEST(SamplePlacement, NeverWorseThanStaying) {
  SyntheticRouting s;
  s.grid = Grid{4, 4};
  s.samples = 64;
  s.tokens = 64;
  s.experts = 32;
  s.topK = 2;
  s.blocks = 2;
  s.locality = 0.6;
  std::vector<TraceRecord> recs = generated(s);
  ASSERT_EQ(recs.size(), 2u);
  TraceHeader h = syntheticHeader(s);
  Instance x{s.grid, recs[0].counts, recs[1].counts, h.blocks[0].expertRank,
             h.blocks[1].expertRank};
  SamplePlacement p = plan(x, true);
  int64_t stayInter, stayIntra, inter, intra;
  objective(x, recs[0].sampleRank, true, stayInter, stayIntra);
  objective(x, p.sampleRank, true, inter, intra);
  EXPECT_LE(inter, stayInter);
  EXPECT_LT(inter, stayInter * 8 / 10) << "locality 0.6 should save > 20%";
}

TEST(SamplePlacement, RefusesBadProblems) {
  Instance x;
  x.grid = Grid{2, 2};
  x.gather = CountMatrix(6, 4);
  x.gatherExperts = {0, 1, 2, 3};
  SamplePlacementProblem p;
  p.grid = x.grid;
  p.gather = {&x.gather, &x.gatherExperts};
  SamplePlacement out;
  EXPECT_NE(planSamplePlacement(p, out).find("not a positive multiple"),
            std::string::npos);
  x.gather = CountMatrix(4, 4);
  x.gatherExperts = {0, 1, 2, 9};
  EXPECT_NE(planSamplePlacement(p, out).find("an expert on rank 9"),
            std::string::npos);
  x.gatherExperts = {0, 1, 2};
  EXPECT_NE(planSamplePlacement(p, out).find("3 expert ranks for 4 experts"),
            std::string::npos);
  x.gatherExperts = {0, 1, 2, 3};
  x.next = CountMatrix(8, 4);
  p.nextScatter = {&x.next, &x.gatherExperts};
  EXPECT_NE(planSamplePlacement(p, out).find("next scatter: counts for 8"),
            std::string::npos);
  p.nextScatter = {};
  p.gather = {};
  EXPECT_NE(planSamplePlacement(p, out).find("gather: no counts"),
            std::string::npos);
}
