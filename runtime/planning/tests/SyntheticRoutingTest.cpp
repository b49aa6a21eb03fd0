//===- SyntheticRoutingTest.cpp - the generator's parameters hold ---------===//

#include "TestSupport.h"

#include "moe_rt/synthetic_routing.h"
#include "TraceChecks.h"

#include <gtest/gtest.h>
#include <set>

using namespace moe_rt::planning;
using namespace planning_test;

namespace {

SyntheticRouting small() {
  SyntheticRouting s;
  s.grid = Grid{2, 2};
  s.samples = 16;
  s.tokens = 64;
  s.experts = 8;
  s.topK = 2;
  s.blocks = 3;
  s.steps = 2;
  s.micro = 2;
  return s;
}

/// Share of all tokens each expert receives, over every record of block b.
std::vector<double> expertShares(const std::vector<TraceRecord> &rs, int b) {
  std::vector<double> share;
  double total = 0;
  for (const TraceRecord &r : rs) {
    if (r.block != b)
      continue;
    share.resize(r.counts.experts, 0.0);
    for (int i = 0; i < r.counts.rows; ++i)
      for (int e = 0; e < r.counts.experts; ++e) {
        share[e] += r.counts.at(i, e);
        total += r.counts.at(i, e);
      }
  }
  for (double &x : share)
    x /= total;
  return share;
}

} // namespace

TEST(SyntheticRouting, RecordsAreValidAndInTraceOrder) {
  SyntheticRouting s = small();
  TraceHeader h = syntheticHeader(s);
  ASSERT_EQ(checkHeader(h), "");
  std::vector<TraceRecord> rs = generated(s);
  ASSERT_EQ(rs.size(), size_t(s.steps * s.micro * s.blocks));
  RecordSequence seq(h);
  for (const TraceRecord &r : rs) {
    EXPECT_EQ(checkRecord(h, r), "");
    EXPECT_EQ(seq.accept(r.step, r.micro, r.block), "");
    EXPECT_EQ(r.sampleRank, contiguousPlacement(s.samples, 4));
  }
  EXPECT_EQ(seq.finish(), "");
  EXPECT_EQ(h.blocks[0].expertRank,
            (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
}

TEST(SyntheticRouting, DeterministicPerSeed) {
  SyntheticRouting s = small();
  std::vector<TraceRecord> a = generated(s), b = generated(s);
  s.seed = 2;
  std::vector<TraceRecord> c = generated(s);
  bool sameAB = true, sameAC = true;
  for (size_t k = 0; k < a.size(); ++k) {
    sameAB &= a[k].counts == b[k].counts;
    sameAC &= a[k].counts == c[k].counts;
  }
  EXPECT_TRUE(sameAB);
  EXPECT_FALSE(sameAC);
}

// zipf = 0 and locality = 0: every expert gets 1/E of the tokens.
TEST(SyntheticRouting, UniformWithoutSkewOrLocality) {
  SyntheticRouting s = small();
  s.zipf = 0;
  s.locality = 0;
  s.tokens = 512;
  s.steps = 4;
  std::vector<double> share = expertShares(generated(s), 0);
  for (double x : share)
    EXPECT_NEAR(x, 1.0 / 8, 0.01);
}

// Top-1, no locality: the most popular expert gets 1 / H_E(zipf) of the
// tokens (H the generalised harmonic number), the next 1/2^zipf of that.
TEST(SyntheticRouting, ZipfSkew) {
  SyntheticRouting s = small();
  s.topK = 1;
  s.zipf = 1.2;
  s.locality = 0;
  s.tokens = 1024;
  s.steps = 6;
  std::vector<double> share = expertShares(generated(s), 1);
  std::sort(share.rbegin(), share.rend());
  double h = 0;
  for (int r = 1; r <= 8; ++r)
    h += 1 / std::pow(r, 1.2);
  EXPECT_NEAR(share[0], 1 / h, 0.01);
  EXPECT_NEAR(share[1], 1 / h / std::pow(2, 1.2), 0.01);
}

// locality = 1: a sample's tokens only reach its topic's experts, the
// same topic in every block of a step.
TEST(SyntheticRouting, FullLocalityConfinesSamples) {
  SyntheticRouting s = small();
  s.locality = 1;
  s.topicExperts = 3;
  for (const TraceRecord &r : generated(s))
    for (int i = 0; i < r.counts.rows; ++i) {
      int used = 0;
      for (int e = 0; e < r.counts.experts; ++e)
        used += r.counts.at(i, e) > 0;
      EXPECT_LE(used, 3);
      EXPECT_GE(used, 2); // top-2 picks two distinct experts
    }
}

TEST(SyntheticRouting, RefusesBadParameters) {
  SyntheticRouting s = small();
  s.samples = 6;
  EXPECT_NE(checkSyntheticRouting(s).find("multiple of the 4 ranks"),
            std::string::npos);
  s = small();
  s.locality = 1.5;
  EXPECT_NE(checkSyntheticRouting(s).find("locality"), std::string::npos);
  s = small();
  s.locality = 1;
  s.topicExperts = 1;
  EXPECT_NE(checkSyntheticRouting(s).find("topic-experts must be >= top-k"),
            std::string::npos);
  s = small();
  s.experts = 6;
  EXPECT_NE(checkSyntheticRouting(s).find("multiple of the ranks"),
            std::string::npos);
  s = small();
  s.topK = 9;
  EXPECT_NE(checkSyntheticRouting(s).find("top-k"), std::string::npos);
}
