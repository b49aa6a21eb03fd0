//===- TraceFormatTest.cpp - the routing trace format, both directions ----===//

#include "moe_rt/routing_trace.h"
#include "moe_rt/synthetic_routing.h"

#include <gtest/gtest.h>
#include <sstream>

using namespace moe_rt::planning;

namespace {

/// A valid trace: 2 nodes x 1 rank, 2 samples of 2 tokens, blocks 0 and 3
/// (top-1 and top-2, 3 experts each), one step of one micro-batch.
const char *kValid = R"(moe-routing-trace 1
source unit test
grid nodes 2 ranks-per-node 1
batch samples 2 tokens 2
block 0 experts 3 token-choice 1 expert-ranks 0 1 1
block 3 experts 3 token-choice 2 expert-ranks 1 0 0
records
record 0 step 4 micro 0 block 0
sample-ranks 0 1
2 0 0
0 1 1
record 1 step 4 micro 0 block 3
sample-ranks 1 0
1 1 2
2 2 0
end 2 records
)";

/// Replaces the first occurrence of `from` in the valid trace.
std::string edit(const std::string &from, const std::string &to) {
  std::string s = kValid;
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

std::string parseError(const std::string &text) {
  TraceHeader h;
  std::vector<TraceRecord> rs;
  std::string error;
  EXPECT_FALSE(parseTrace(text, "t.trace", h, rs, error)) << text;
  return error;
}

} // namespace

TEST(TraceFormat, ReadsTheDocumentedExample) {
  TraceHeader h;
  std::vector<TraceRecord> rs;
  std::string error;
  ASSERT_TRUE(parseTrace(kValid, "t.trace", h, rs, error)) << error;
  EXPECT_EQ(h.source, "unit test");
  EXPECT_EQ(h.grid, (Grid{2, 1}));
  EXPECT_EQ(h.samples, 2);
  EXPECT_EQ(h.tokensPerSample, 2);
  ASSERT_EQ(h.blocks.size(), 2u);
  EXPECT_EQ(h.blocks[1].block, 3);
  EXPECT_EQ(h.blocks[1].topK, 2);
  EXPECT_EQ(h.blocks[1].expertRank, (std::vector<int>{1, 0, 0}));
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1].step, 4);
  EXPECT_EQ(rs[1].block, 3);
  EXPECT_EQ(rs[1].sampleRank, (std::vector<int>{1, 0}));
  EXPECT_EQ(rs[1].counts.at(1, 1), 2u);
  // Comments, blank lines and CRLF line ends carry nothing.
  std::string crlf;
  for (char c : std::string(kValid))
    crlf += c == '\n' ? std::string("\r\n\n# note\n") : std::string(1, c);
  ASSERT_TRUE(parseTrace(crlf, "crlf.trace", h, rs, error)) << error;
  EXPECT_EQ(rs.size(), 2u);
}

TEST(TraceFormat, WriterAndReaderRoundTrip) {
  SyntheticRouting s;
  s.grid = Grid{2, 2};
  s.samples = 8;
  s.tokens = 16;
  s.experts = 8;
  s.topK = 2;
  s.blocks = 3;
  s.steps = 2;
  s.micro = 2;
  TraceHeader h = syntheticHeader(s);
  std::ostringstream out;
  TraceWriter w;
  std::string error;
  ASSERT_TRUE(w.open(out, "mem", h, error)) << error;
  std::vector<TraceRecord> written;
  ASSERT_EQ(generateSyntheticRouting(s,
                                     [&](const TraceRecord &r) {
                                       written.push_back(r);
                                       return w.write(r, error);
                                     }),
            "");
  ASSERT_EQ(error, "");
  ASSERT_TRUE(w.close(error)) << error;
  TraceHeader back;
  std::vector<TraceRecord> read;
  ASSERT_TRUE(parseTrace(out.str(), "mem", back, read, error)) << error;
  EXPECT_EQ(back.source, h.source);
  EXPECT_EQ(back.blocks.size(), h.blocks.size());
  ASSERT_EQ(read.size(), written.size());
  for (size_t k = 0; k < read.size(); ++k) {
    EXPECT_EQ(read[k].step, written[k].step);
    EXPECT_EQ(read[k].micro, written[k].micro);
    EXPECT_EQ(read[k].block, written[k].block);
    EXPECT_EQ(read[k].sampleRank, written[k].sampleRank);
    EXPECT_EQ(read[k].counts, written[k].counts);
  }
}

// Each malformed variant is refused with the file, the line, and for a
// record its number, step, micro-batch and block.
TEST(TraceFormat, RefusesMalformedTraces) {
  struct Case {
    std::string text, expected;
  };
  const std::string rec1 = "t.trace:13: record 1 (step 4, micro 0, block 3): ";
  std::vector<Case> cases = {
      {"", "t.trace:0: empty file, not a routing trace"},
      {edit("moe-routing-trace 1", "moe-params 1"),
       "t.trace:1: not a routing trace"},
      {edit("moe-routing-trace 1", "moe-routing-trace 2"),
       "t.trace:1: routing trace version 2, this reader reads version 1"},
      {edit("grid nodes 2 ranks-per-node 1\n", ""),
       "t.trace:3: unexpected header line 'batch samples 2 tokens 2', "
       "expected 'grid nodes N ranks-per-node P'"},
      {edit("nodes 2", "nodes 0"), "t.trace:3: expected 'grid nodes N"},
      {edit("nodes 2", "nodes 2x"), "t.trace:3: expected 'grid nodes N"},
      {edit("samples 2", "samples 3"),
       "t.trace:4: batch samples 3 is not a multiple of the 2 ranks"},
      {edit("samples 2", "samples 99999999999"),
       "t.trace:4: expected 'batch samples I tokens L'"},
      {edit("expert-ranks 0 1 1", "expert-ranks 0 1 2"),
       "t.trace:5: block 0: expert 2 on rank 2, the grid has ranks 0..1"},
      {edit("expert-ranks 0 1 1", "expert-ranks 0 1"),
       "t.trace:5: block 0: 2 expert-ranks for 3 experts"},
      {edit("expert-ranks 0 1 1", "expert-ranks 0 1 1 0"),
       "t.trace:5: block 0: more expert-ranks than its 3 experts"},
      {edit("token-choice 1", "token-choice 4"),
       "t.trace:5: block 0: token-choice 4 must be between 1 and its 3"},
      {edit("token-choice 1", "top-k 1"),
       "t.trace:5: block 0: expected token-choice K or expert-choice"},
      {edit("block 3 experts", "block 0 experts"),
       "t.trace:6: block 0 declared after block 0"},
      {edit("records\n", ""), "t.trace:7: unexpected header line"},
      {"moe-routing-trace 1\ngrid nodes 1 ranks-per-node 1\n",
       "t.trace:2: the file ends inside the header"},
      {edit("record 0 step", "record 5 step"),
       "t.trace:8: record 0 (step 4, micro 0, block 0): numbered 5, record 0 "
       "is due"},
      {edit("record 1 step 4 micro 0 block 3", "record 1 step 5 micro 0 block 3"),
       "t.trace:12: record 1 (step 5, micro 0, block 3): step 4 micro 0 has "
       "no record of block 3"},
      {edit("record 0 step 4 micro 0 block 0", "record 0 step 4 micro 0 block 3"),
       "block 3 where block 0 is due"},
      {edit("record 0 step 4 micro 0 block 0", "record 0 step 4 micro 0 block 1"),
       "block 1 is not declared in the header"},
      {edit("sample-ranks 1 0", "sample-ranks 1 1"),
       rec1 + "rank 0 holds 0 samples, every rank holds samples / ranks = 1"},
      {edit("sample-ranks 1 0", "sample-ranks 1 0 1"),
       rec1 + "sample-ranks holds more than the 2 samples"},
      {edit("sample-ranks 1 0", "sample-ranks 1 -1"),
       rec1 + "sample-ranks holds '-1', not a rank"},
      {edit("sample-ranks 1 0", "ranks 1 0"),
       rec1 + "expected 'sample-ranks'"},
      {edit("1 1 2\n", "1 1 2 0\n"),
       "t.trace:14: record 1 (step 4, micro 0, block 3): sample 0: more than "
       "3 counts"},
      {edit("1 1 2\n", "1 1\n"), "sample 0: 2 counts, expected one per expert"},
      {edit("1 1 2\n", "1 0 3\n"),
       "sample 0 sends 3 tokens to expert 2, more than its 2 tokens"},
      {edit("1 1 2\n", "1 1 1\n"),
       "t.trace:14: record 1 (step 4, micro 0, block 3): sample 0's counts "
       "sum to 3, token choice routes tokens x top-k = 4"},
      {edit("1 1 2\n", "1 1 x\n"), "sample 0: 'x' is not a token count"},
      {edit("2 2 0\nend 2 records\n", "2 2 0\n"),
       "t.trace:15: the file ends after 2 records without its 'end 2 "
       "records' line"},
      {edit("2 2 0\nend 2 records\n", ""),
       "t.trace:14: record 1 (step 4, micro 0, block 3): the file ends after "
       "1 of 2 count rows"},
      {edit("end 2 records", "end 3 records"),
       "t.trace:16: the end line counts 3 records, the file holds 2"},
      {std::string(kValid) + "record 2 step 5 micro 0 block 0\n",
       "t.trace:17: text after the end line"},
  };
  for (const Case &c : cases) {
    std::string error = parseError(c.text);
    EXPECT_NE(error.find(c.expected), std::string::npos)
        << "expected '" << c.expected << "'\n     got '" << error << "'";
  }
  // A trace ending inside a (step, micro) group.
  std::string cut = kValid;
  cut = cut.substr(0, cut.find("record 1 step")) + "end 1 records\n";
  EXPECT_NE(parseError(cut).find("step 4 micro 0 ends without a record of "
                                 "block 3"),
            std::string::npos)
      << parseError(cut);
}

TEST(TraceFormat, ExpertChoiceRowsNeedNotSumToTopK) {
  std::string text =
      edit("block 3 experts 3 token-choice 2", "block 3 experts 3 expert-choice");
  size_t at = text.find("1 1 2\n");
  text.replace(at, 6, "2 0 1\n");
  TraceHeader h;
  std::vector<TraceRecord> rs;
  std::string error;
  EXPECT_TRUE(parseTrace(text, "ec.trace", h, rs, error)) << error;
  EXPECT_EQ(h.blocks[1].routing, RoutingKind::ExpertChoice);
}

TEST(TraceFormat, WriterRefusesWhatTheReaderWould) {
  TraceHeader h;
  std::vector<TraceRecord> rs;
  std::string error;
  ASSERT_TRUE(parseTrace(kValid, "t.trace", h, rs, error)) << error;
  std::ostringstream out;
  TraceWriter w;
  ASSERT_TRUE(w.open(out, "w.trace", h, error)) << error;
  TraceRecord bad = rs[0];
  bad.counts.at(0, 0) = 1; // row sum 1, top-1 of 2 tokens needs 2
  EXPECT_FALSE(w.write(bad, error));
  EXPECT_NE(error.find("w.trace: refusing to write record 0 (step 4, micro "
                       "0, block 0): sample 0's counts sum to 1"),
            std::string::npos)
      << error;
  EXPECT_FALSE(w.write(rs[1], error)) << "block 3 before block 0";
  EXPECT_NE(error.find("block 3 where block 0 is due"), std::string::npos);
  ASSERT_TRUE(w.write(rs[0], error)) << error;
  EXPECT_FALSE(w.close(error)) << "block 3 of step 4 is missing";
  EXPECT_NE(error.find("ends without a record of block 3"), std::string::npos);
  ASSERT_TRUE(w.write(rs[1], error)) << error;
  ASSERT_TRUE(w.close(error)) << error;
  EXPECT_EQ(out.str(), kValid);

  TraceHeader broken = h;
  broken.grid.nodes = 3;
  TraceWriter w2;
  EXPECT_FALSE(w2.open(out, "w2.trace", broken, error));
  EXPECT_NE(error.find("not a multiple of the 3 ranks"), std::string::npos);
}

TEST(TraceFormat, FileErrorsNameTheFile) {
  TraceReader r;
  std::string error;
  EXPECT_FALSE(r.open("/nonexistent/dir/x.trace", error));
  EXPECT_EQ(error, "/nonexistent/dir/x.trace: cannot open the routing trace");
  TraceWriter w;
  TraceHeader h;
  EXPECT_FALSE(w.open("/nonexistent/dir/y.trace", h, error));
  EXPECT_EQ(error, "/nonexistent/dir/y.trace: cannot create the routing trace");
}
