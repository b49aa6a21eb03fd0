//===- TraceMutationTest.cpp - damaged traces: an error, never a crash ----===//
//
// Seeded mutation fuzzing of the trace reader: 20,000 damaged copies of
// valid traces (bytes flipped, inserted, deleted; lines dropped,
// duplicated, swapped; numbers replaced by huge, negative or empty ones;
// truncation). Each is either read, and then every record obeys the
// format's rules, or refused with "FILE:LINE: ..."; none crashes, hangs or
// allocates what a damaged header claims (run it under ASan to see that).
//
//===----------------------------------------------------------------------===//

#include "moe_rt/routing_trace.h"
#include "moe_rt/synthetic_routing.h"
#include "TraceChecks.h"

#include <gtest/gtest.h>
#include <random>
#include <regex>
#include <sstream>

using namespace moe_rt::planning;

namespace {

std::string syntheticText(int blocks, int micro, uint64_t seed) {
  SyntheticRouting s;
  s.grid = Grid{2, 2};
  s.samples = 8;
  s.tokens = 6;
  s.experts = 4;
  s.topK = 2;
  s.blocks = blocks;
  s.steps = 2;
  s.micro = micro;
  s.seed = seed;
  std::ostringstream out;
  TraceWriter w;
  std::string error;
  EXPECT_TRUE(w.open(out, "seed", syntheticHeader(s), error)) << error;
  EXPECT_EQ(generateSyntheticRouting(
                s, [&](const TraceRecord &r) { return w.write(r, error); }),
            "");
  EXPECT_TRUE(w.close(error)) << error;
  return out.str();
}

std::vector<std::string> lines(const std::string &s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);)
    out.push_back(l);
  return out;
}

std::string join(const std::vector<std::string> &ls) {
  std::string s;
  for (const std::string &l : ls)
    s += l + "\n";
  return s;
}

std::string mutate(std::string s, std::mt19937_64 &rng) {
  static const char *numbers[] = {"0",  "-1", "4294967296", "99999999999999999999",
                                  "",   "1e3", "2147483647", "65536", "7", "+3"};
  auto pick = [&](size_t n) { return n ? size_t(rng() % n) : 0; };
  int edits = 1 + int(rng() % 3);
  for (int k = 0; k < edits; ++k) {
    switch (rng() % 8) {
    case 0: // flip a byte
      if (!s.empty())
        s[pick(s.size())] = char(rng() % 256);
      break;
    case 1: // insert bytes
      s.insert(pick(s.size() + 1), std::string(1 + rng() % 3, char(rng() % 128)));
      break;
    case 2: // delete a range
      if (!s.empty()) {
        size_t at = pick(s.size());
        s.erase(at, 1 + rng() % 8);
      }
      break;
    case 3: // truncate
      s.resize(pick(s.size() + 1));
      break;
    case 4: { // replace a number by a hostile one
      std::vector<size_t> starts;
      for (size_t i = 0; i < s.size(); ++i)
        if (isdigit((unsigned char)s[i]) && (i == 0 || !isdigit((unsigned char)s[i - 1])))
          starts.push_back(i);
      if (starts.empty())
        break;
      size_t at = starts[pick(starts.size())], end = at;
      while (end < s.size() && isdigit((unsigned char)s[end]))
        ++end;
      s.replace(at, end - at, numbers[rng() % 10]);
      break;
    }
    default: { // line-level: drop, duplicate, swap
      std::vector<std::string> ls = lines(s);
      if (ls.empty())
        break;
      size_t a = pick(ls.size()), b = pick(ls.size());
      int op = int(rng() % 3);
      if (op == 0)
        ls.erase(ls.begin() + a);
      else if (op == 1)
        ls.insert(ls.begin() + a, ls[b]);
      else
        std::swap(ls[a], ls[b]);
      s = join(ls);
    }
    }
  }
  return s;
}

} // namespace

TEST(TraceMutation, DamagedTracesAreReadOrRefused) {
  std::vector<std::string> seeds = {syntheticText(1, 1, 1),
                                    syntheticText(3, 2, 2),
                                    syntheticText(2, 1, 3)};
  std::mt19937_64 rng(2024);
  std::regex located("^mutant:[0-9]+: .+");
  int accepted = 0, refused = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string text = mutate(seeds[trial % seeds.size()], rng);
    TraceHeader h;
    std::vector<TraceRecord> rs;
    std::string error;
    if (parseTrace(text, "mutant", h, rs, error)) {
      ++accepted;
      ASSERT_EQ(checkHeader(h), "") << text;
      RecordSequence seq(h);
      for (const TraceRecord &r : rs) {
        ASSERT_EQ(checkRecord(h, r), "") << text;
        ASSERT_EQ(seq.accept(r.step, r.micro, r.block), "") << text;
      }
      ASSERT_EQ(seq.finish(), "") << text;
    } else {
      ++refused;
      ASSERT_TRUE(std::regex_match(error, located))
          << "unlocated error '" << error << "' for:\n" << text;
    }
  }
  // Both outcomes occur (a mutation can be harmless: a comment, a blank).
  EXPECT_GT(refused, 15000);
  EXPECT_GT(accepted, 10);
}
