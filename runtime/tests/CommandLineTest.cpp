//===- CommandLineTest.cpp - the tools' shared option reader --------------===//
//
// moe_rt/command_line.h reads the options of moe-run, moe-export-params,
// moe-export-onnx and the generated-step driver; these tests pin what each
// reader accepts and that every refusal names the flag and the word.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/command_line.h"
#include "moe_rt/expert_placement.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace {

using moe_rt::options::CommandLine;

/// A small tool: --steps N, --seed S, --iters N in [1, 100], --timeout T,
/// --mode a|b, -o FILE, --verbose, one positional input.
struct Tool {
  int steps = 1;
  uint64_t seed = 7, iters = 10;
  double timeout = 60;
  std::string mode, output, input;
  bool verbose = false;
};

std::string parse(std::vector<std::string> words, Tool &t) {
  std::vector<char *> argv = {const_cast<char *>("tool")};
  for (std::string &w : words)
    argv.push_back(w.data());
  CommandLine args(int(argv.size()), argv.data());
  while (args.next()) {
    if (args.flag("--verbose"))
      t.verbose = true;
    else if (!args.count("--steps", t.steps) && !args.whole("--seed", t.seed) &&
             !args.integer("--iters", 1, 100, t.iters) &&
             !args.seconds("--timeout", t.timeout) &&
             !args.choice("--mode", {"a", "b"}, t.mode) &&
             !args.text("-o", t.output) && !args.positional(t.input, "input"))
      args.unknown();
  }
  return args.error();
}

TEST(CommandLine, ReadsEveryKind) {
  Tool t;
  EXPECT_EQ(parse({"in.mlir", "--steps", "3", "--seed", "0", "--iters", "100",
                   "--timeout", "1.5", "--mode", "b", "-o", "out", "--verbose"},
                  t),
            "");
  EXPECT_EQ(t.iters, 100u);
  EXPECT_EQ(t.input, "in.mlir");
  EXPECT_EQ(t.steps, 3);
  EXPECT_EQ(t.seed, 0u);
  EXPECT_EQ(t.timeout, 1.5);
  EXPECT_EQ(t.mode, "b");
  EXPECT_EQ(t.output, "out");
  EXPECT_TRUE(t.verbose);
}

TEST(CommandLine, DefaultsStayWithoutFlags) {
  Tool t;
  EXPECT_EQ(parse({}, t), "");
  EXPECT_EQ(t.steps, 1);
  EXPECT_EQ(t.seed, 7u);
  EXPECT_TRUE(t.input.empty());
}

TEST(CommandLine, RefusalsNameTheFlagAndTheWord) {
  struct Case {
    std::vector<std::string> words;
    std::string error;
  } cases[] = {
      {{"--steps", "0"}, "--steps needs a positive integer, got '0'"},
      {{"--steps", "3x"}, "--steps needs a positive integer, got '3x'"},
      {{"--steps", "2147483648"},
       "--steps needs a positive integer, got '2147483648'"},
      {{"--seed", "-5"}, "--seed needs a non-negative integer, got '-5'"},
      {{"--timeout", "abc"},
       "--timeout needs a number of seconds >= 0, got 'abc'"},
      {{"--timeout", "-1"},
       "--timeout needs a number of seconds >= 0, got '-1'"},
      {{"--iters", "0"}, "--iters needs an integer in [1, 100], got '0'"},
      {{"--iters", "101"}, "--iters needs an integer in [1, 100], got '101'"},
      {{"--mode", "c"}, "--mode needs 'a' or 'b', got 'c'"},
      {{"-o"}, "-o needs a value"},
      {{"--steps"}, "--steps needs a value"},
      {{"--frobnicate"}, "unknown argument '--frobnicate'"},
      {{"a.mlir", "b.mlir"}, "more than one input ('a.mlir', 'b.mlir')"},
  };
  for (const Case &c : cases) {
    Tool t;
    EXPECT_EQ(parse(c.words, t), c.error) << c.words[0];
  }
}

TEST(CommandLine, FirstErrorStopsTheLoop) {
  Tool t;
  EXPECT_EQ(parse({"--steps", "x", "--seed", "y", "--verbose"}, t),
            "--steps needs a positive integer, got 'x'");
  EXPECT_FALSE(t.verbose);
  EXPECT_EQ(t.steps, 1);
}

TEST(CommandLine, DashIsAFileAndAValueMayLookLikeAFlag) {
  Tool t;
  EXPECT_EQ(parse({"-", "-o", "--verbose"}, t), "");
  EXPECT_EQ(t.input, "-");
  EXPECT_EQ(t.output, "--verbose");
  EXPECT_FALSE(t.verbose);
}

TEST(CommandLine, AFlagStaysTheWordWhileItsValueIsRead) {
  char tool[] = "tool", flag[] = "-o", value[] = "out";
  char *argv[] = {tool, flag, value};
  CommandLine args(3, argv);
  std::string out;
  ASSERT_TRUE(args.next());
  EXPECT_TRUE(args.text("-o", out));
  EXPECT_EQ(args.word(), "-o");
  EXPECT_EQ(out, "out");
  EXPECT_FALSE(args.next());
}

TEST(CommandLine, RepeatedKeepsEveryValueInOrder) {
  char tool[] = "tool", flag[] = "-m", a[] = "0=1,0", b[] = "1=0,1";
  char *argv[] = {tool, flag, a, flag, b, flag};
  CommandLine args(6, argv);
  std::vector<std::string> maps;
  while (args.next())
    if (!args.repeated("-m", maps))
      args.unknown();
  EXPECT_EQ(maps, (std::vector<std::string>{"0=1,0", "1=0,1"}));
  EXPECT_EQ(args.error(), "-m needs a value");
}

/// Random command lines from flags, values and junk: the reader never
/// crashes, and every error names a word of the command line (the flag,
/// the value or the unknown argument).
TEST(CommandLine, RandomCommandLinesFailNamingAWord) {
  const char *pool[] = {"--steps",   "--seed",  "--iters",
                        "--timeout", "--mode",  "-o",
                        "--verbose", "3",       "0",
                        "-1",        "x",       "",
                        "a",         "1e400",   "--",
                        "-",         "in.mlir", "18446744073709551616"};
  std::mt19937 rng(5);
  for (int round = 0; round < 2000; ++round) {
    std::vector<std::string> words(rng() % 6);
    for (std::string &w : words)
      w = pool[rng() % (sizeof(pool) / sizeof(pool[0]))];
    Tool t;
    std::string error = parse(words, t);
    if (error.empty())
      continue;
    bool named = false;
    for (const std::string &w : words)
      named |= !w.empty() && error.find("'" + w + "'") != std::string::npos;
    for (const std::string &w : words)
      named |= !w.empty() && error.rfind(w + " needs", 0) == 0;
    EXPECT_TRUE(named) << error;
  }
}

TEST(ExpertPlacement, SplitsALaterMap) {
  int step = 0;
  std::string map;
  EXPECT_EQ(moe_rt::expert_placement::splitLaterMap("2:1,0", step, map), "");
  EXPECT_EQ(step, 2);
  EXPECT_EQ(map, "1,0");
  EXPECT_EQ(moe_rt::expert_placement::splitLaterMap("3:@f:x", step, map), "");
  EXPECT_EQ(map, "@f:x");
  for (const char *bad : {"1:1,0", "x:1,0", "2", ":1,0", "-2:1,0"})
    EXPECT_EQ(moe_rt::expert_placement::splitLaterMap(bad, step, map),
              "needs STEP:RANKS with STEP >= 2, got '" + std::string(bad) + "'")
        << bad;
}

} // namespace
