//===- ParamsFileTest.cpp - the initial-parameter file format -------------===//
//
// runtime/include/moe_rt/params_file.h: what moe-export-params writes,
// moe_step_load_params reads back. Values must round-trip exactly, each
// rank must get its own section, and a damaged or foreign file must be
// refused with a message that says what is wrong.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/params_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

using namespace moe_rt::params_file;

namespace {

/// Everything a writer callback printed, as a string.
template <typename Fn> std::string written(Fn fn) {
  std::FILE *f = std::tmpfile();
  EXPECT_NE(f, nullptr);
  fn(f);
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
    out.append(buf, n);
  std::fclose(f);
  return out;
}

bool read(const std::string &text, int rank, int ranks,
          std::vector<Tensor> &out, std::string &error) {
  std::istringstream in(text);
  return readRank(in, rank, ranks, out, error);
}

/// Two ranks, two parameters each (a matrix and a scalar), rank r's
/// values offset by r so that a wrong section is visible.
std::string twoRanks(std::vector<float> &matrix) {
  return written([&](std::FILE *f) {
    writeHeader(f, 2, 2);
    for (int r = 0; r < 2; ++r) {
      writeRank(f, r);
      std::vector<float> m = matrix;
      for (float &v : m)
        v += r;
      writeTensor(f, "blocks.0.w", {2, 3}, m.data());
      float scalar = 0.5f + r;
      writeTensor(f, "scale", {}, &scalar);
    }
  });
}

TEST(ParamsFile, RoundTripsEveryRankExactly) {
  std::vector<float> matrix = {1.0f / 3, -2.5e-7f, 3e38f, 0.0f, -0.0f, 1e-40f};
  std::string text = twoRanks(matrix);
  for (int r = 0; r < 2; ++r) {
    std::vector<Tensor> got;
    std::string error;
    ASSERT_TRUE(read(text, r, 2, got, error)) << error;
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].name, "blocks.0.w");
    EXPECT_EQ(got[0].shape, (std::vector<int64_t>{2, 3}));
    ASSERT_EQ(got[0].values.size(), 6u);
    for (size_t k = 0; k < 6; ++k) {
      float want = matrix[k] + r;
      // Bit-exact: %.9g round-trips float32, denormals included.
      EXPECT_EQ(std::memcmp(&got[0].values[k], &want, sizeof(float)), 0)
          << "rank " << r << " value " << k;
    }
    EXPECT_EQ(got[1].name, "scale");
    EXPECT_TRUE(got[1].shape.empty());
    ASSERT_EQ(got[1].values.size(), 1u);
    EXPECT_EQ(got[1].values[0], 0.5f + r);
  }
}

TEST(ParamsFile, RandomValuesRoundTrip) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-10, 10);
  std::vector<float> v(1000);
  for (float &x : v)
    x = d(rng) * std::pow(10.0f, float(int(rng() % 20) - 10));
  std::string text = written([&](std::FILE *f) {
    writeHeader(f, 1, 1);
    writeRank(f, 0);
    writeTensor(f, "w", {10, 100}, v.data());
  });
  std::vector<Tensor> got;
  std::string error;
  ASSERT_TRUE(read(text, 0, 1, got, error)) << error;
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].values, v);
}

TEST(ParamsFile, NonFiniteValuesRoundTrip) {
  float v[3] = {std::numeric_limits<float>::infinity(),
                -std::numeric_limits<float>::infinity(),
                std::numeric_limits<float>::quiet_NaN()};
  std::string text = written([&](std::FILE *f) {
    writeHeader(f, 1, 1);
    writeRank(f, 0);
    writeTensor(f, "w", {3}, v);
  });
  std::vector<Tensor> got;
  std::string error;
  ASSERT_TRUE(read(text, 0, 1, got, error)) << error;
  EXPECT_TRUE(std::isinf(got[0].values[0]) && got[0].values[0] > 0);
  EXPECT_TRUE(std::isinf(got[0].values[1]) && got[0].values[1] < 0);
  EXPECT_TRUE(std::isnan(got[0].values[2]));
}

/// The error message of reading `text` as rank `rank` of `ranks`.
std::string errorOf(const std::string &text, int rank = 0, int ranks = 2) {
  std::vector<Tensor> got;
  std::string error;
  EXPECT_FALSE(read(text, rank, ranks, got, error)) << "accepted:\n" << text;
  return error;
}

TEST(ParamsFile, RefusesAnotherNumberOfRanks) {
  std::vector<float> matrix(6, 1.0f);
  EXPECT_EQ(errorOf(twoRanks(matrix), 0, 4),
            "written for 2 ranks, the job has 4 (rebuild it for this grid, or "
            "run with mpirun -np 2)");
}

TEST(ParamsFile, RefusesWhatIsNotAParameterFile) {
  EXPECT_EQ(errorOf(""), "empty file, not a parameter file");
  EXPECT_NE(errorOf("embed.table 4x8 1 2 3\n")
                .find("not a parameter file (first line 'embed.table 4x8"),
            std::string::npos);
  EXPECT_EQ(errorOf("moe-params 2 ranks 2 parameters 1\n"),
            "parameter file version 2, this runtime reads version 1");
}

TEST(ParamsFile, RefusesDamagedSections) {
  const std::string header = "moe-params 1 ranks 2 parameters 2\n";
  // Rank 1's section is missing (a truncated file).
  EXPECT_EQ(errorOf(header + "rank 0\nw 2 1 2\nb - 3\n", 1),
            "no section 'rank 1' (the file is truncated)");
  // Fewer parameters than the header says.
  EXPECT_EQ(errorOf(header + "rank 0\nw 2 1 2\nrank 1\n"),
            "'rank 0' has 1 parameters, the header says 2");
  // Too few and too many values, a bad shape, a repeated name.
  EXPECT_EQ(errorOf(header + "rank 0\nw 2x2 1 2 3\nb - 3\n"),
            "line 3: parameter 'w' (2x2): 3 values, expected 4");
  EXPECT_EQ(errorOf(header + "rank 0\nw 2 1 2 3\nb - 3\n"),
            "line 3: parameter 'w' (2): more than 2 values");
  EXPECT_EQ(errorOf(header + "rank 0\nw 2x 1 2\nb - 3\n"),
            "line 3: parameter 'w': bad shape '2x'");
  EXPECT_EQ(errorOf(header + "rank 0\nw 2 1 2\nb x1\n"),
            "line 4: parameter 'b': bad shape 'x1'");
  EXPECT_EQ(errorOf(header + "rank 0\nw 2 1 2\nw 2 1 2\n"),
            "line 4: parameter 'w' appears twice in 'rank 0'");
  EXPECT_EQ(errorOf(header + "rank 0\nw 2 1 abc\nb - 3\n"),
            "line 3: parameter 'w' (2): 1 values, expected 2");
}

TEST(ParamsFile, ShapesAreSpelledAsInMessages) {
  EXPECT_EQ(formatShape({}), "-");
  EXPECT_EQ(formatShape({8}), "8");
  EXPECT_EQ(formatShape({4, 16, 128}), "4x16x128");
}

} // namespace

namespace {

// Damaged files of every kind (bytes flipped, deleted, duplicated, digits
// grown into huge shapes) are refused or read, never a crash, a throw or
// an allocation the file cannot back: moe_step_load_params runs inside a
// trainer. Seeded, so a failure repeats.
TEST(ParamsFile, MutatedFilesAreRefusedNotCrashedOn) {
  std::vector<float> matrix = {1, 2, 3, 4, 5, 6};
  const std::string valid = twoRanks(matrix);
  std::mt19937 rng(20261122);
  const std::string alphabet = "0123456789x -.e\n\r\tabrnkpmoe";
  int refused = 0, accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string text = valid;
    int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      size_t at = rng() % text.size();
      switch (rng() % 4) {
      case 0:
        text[at] = alphabet[rng() % alphabet.size()];
        break;
      case 1:
        text.erase(at, 1 + rng() % 8);
        break;
      case 2:
        text.insert(at, text.substr(at, 1 + rng() % 16));
        break;
      default:
        text.insert(at, std::string(1 + rng() % 14, '9'));
        break;
      }
    }
    std::vector<Tensor> out;
    std::string error;
    bool ok = false;
    EXPECT_NO_THROW(ok = read(text, int(rng() % 2), 2, out, error))
        << "input:\n"
        << text;
    if (ok)
      ++accepted;
    else {
      ++refused;
      EXPECT_FALSE(error.empty());
    }
  }
  // Most mutations break something; some (a changed digit) still read.
  EXPECT_GT(refused, 10000);
  EXPECT_GT(accepted, 0);
}

} // namespace
