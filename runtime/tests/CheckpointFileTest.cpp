//===- CheckpointFileTest.cpp - the checkpoint format (checkpoint_file.h) -===//
//
// Rank files and manifests round-trip bit for bit; every truncation, every
// flipped byte and every mutation of a valid file is refused with a
// message naming the file (and the tensor, where one is at fault) — never
// a crash and never a silently different tensor; the directory protocol
// leaves LATEST on the last complete checkpoint when a writer stops early.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/checkpoint_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>

namespace {

namespace ckpt = moe_rt::checkpoint;

ckpt::RankState sample() {
  ckpt::RankState s;
  s.rank = 1;
  s.ranks = 4;
  s.counters = {12, 12, 7};
  s.tensors.push_back({"block0.attn.wq", ckpt::Role::param, {2, 3},
                       {1.5f, -2, 3e-38f, std::numeric_limits<float>::infinity(),
                        -0.0f, 6}});
  s.tensors.push_back({"block0.attn.wq.exp_avg", ckpt::Role::state, {2, 3},
                       {0, 1, 2, 3, 4, 5}});
  s.tensors.push_back({"scale", ckpt::Role::param, {}, {42}});
  return s;
}

TEST(CheckpointFile, RankFilesRoundTripBitForBit) {
  ckpt::RankState s = sample();
  s.tensors[0].values[2] = std::nanf("7");
  std::string bytes = ckpt::encodeRank(s), error;
  ckpt::RankState back;
  ASSERT_TRUE(ckpt::decodeRank(bytes, "r.bin", back, error)) << error;
  EXPECT_EQ(back.rank, 1);
  EXPECT_EQ(back.ranks, 4);
  EXPECT_EQ(back.counters.step, 12u);
  EXPECT_EQ(back.counters.seed, 7u);
  ASSERT_EQ(back.tensors.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(back.tensors[k].name, s.tensors[k].name);
    EXPECT_EQ(back.tensors[k].role, s.tensors[k].role);
    EXPECT_EQ(back.tensors[k].shape, s.tensors[k].shape);
    ASSERT_EQ(back.tensors[k].values.size(), s.tensors[k].values.size());
    EXPECT_EQ(std::memcmp(back.tensors[k].values.data(),
                          s.tensors[k].values.data(),
                          s.tensors[k].values.size() * sizeof(float)),
              0);
  }
}

TEST(CheckpointFile, ManifestsRoundTrip) {
  ckpt::Manifest m;
  m.model = "00ff00ff00ff00ff";
  m.grid = {2, 2};
  m.epAxes = {0, 1};
  m.ranks = 4;
  m.counters = {100, 100, 3};
  m.tensors.push_back({"up", ckpt::Role::param, ckpt::Layout::experts, {2, 4, 8}});
  m.tensors.push_back({"up.exp_avg", ckpt::Role::state, ckpt::Layout::experts, {2, 4, 8}});
  m.tensors.push_back({"gain", ckpt::Role::param, ckpt::Layout::replicated, {}});
  ckpt::Manifest back;
  std::string error;
  ASSERT_TRUE(ckpt::decodeManifest(ckpt::encodeManifest(m), "manifest", back,
                                   error))
      << error;
  EXPECT_EQ(back.model, m.model);
  EXPECT_EQ(back.grid, m.grid);
  EXPECT_EQ(back.epAxes, m.epAxes);
  EXPECT_EQ(back.counters.step, 100u);
  ASSERT_EQ(back.tensors.size(), 3u);
  EXPECT_EQ(back.tensors[1].role, ckpt::Role::state);
  EXPECT_EQ(back.tensors[0].layout, ckpt::Layout::experts);
  EXPECT_EQ(back.tensors[2].localShape, std::vector<int64_t>{});
}

TEST(CheckpointFile, EveryTruncationIsRefused) {
  std::string bytes = ckpt::encodeRank(sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    ckpt::RankState out;
    std::string error;
    EXPECT_FALSE(ckpt::decodeRank(bytes.substr(0, n), "ckpt/rank1.bin", out,
                                  error))
        << n;
    EXPECT_NE(error.find("'ckpt/rank1.bin'"), std::string::npos) << error;
  }
}

TEST(CheckpointFile, EveryFlippedByteIsRefusedNamingTheTensor) {
  std::string bytes = ckpt::encodeRank(sample());
  int namedTensor = 0;
  for (size_t at = 0; at < bytes.size(); ++at) {
    std::string damaged = bytes;
    damaged[at] = char(damaged[at] ^ 0x10);
    ckpt::RankState out;
    std::string error;
    EXPECT_FALSE(ckpt::decodeRank(damaged, "r.bin", out, error)) << at;
    namedTensor += error.find("tensor '") != std::string::npos;
  }
  // A damaged value or shape is reported with its tensor's name.
  EXPECT_GT(namedTensor, int(bytes.size() / 2));
  // The first value of wq: its tensor's checksum names it.
  ckpt::RankState s = sample();
  std::string damaged = bytes;
  size_t at = damaged.find("block0.attn.wq") + 14 + 1 + 4 + 2 * 8 + 8;
  damaged[at] ^= 1;
  ckpt::RankState out;
  std::string error;
  EXPECT_FALSE(ckpt::decodeRank(damaged, "r.bin", out, error));
  EXPECT_EQ(error, "checkpoint file 'r.bin': tensor 'block0.attn.wq': "
                   "checksum mismatch (the file is corrupted)");
}

TEST(CheckpointFile, MutatedFilesAreRefusedNotCrashedOn) {
  const std::string valid = ckpt::encodeRank(sample());
  std::mt19937 rng(20261125);
  int refused = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string bytes = valid;
    int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      size_t at = rng() % bytes.size();
      switch (rng() % 4) {
      case 0:
        bytes[at] = char(rng());
        break;
      case 1:
        bytes.erase(at, 1 + rng() % 8);
        break;
      case 2:
        bytes.insert(at, bytes.substr(at, 1 + rng() % 16));
        break;
      default:
        bytes.insert(at, std::string(1 + rng() % 14, '\xff'));
        break;
      }
    }
    if (bytes == valid)
      continue;
    ckpt::RankState out;
    std::string error;
    bool ok = true;
    EXPECT_NO_THROW(ok = ckpt::decodeRank(bytes, "r.bin", out, error));
    EXPECT_FALSE(ok) << "a mutated file was accepted (iteration " << iter
                     << ")";
    refused += !ok && !error.empty();
  }
  EXPECT_GT(refused, 19000);
}

TEST(CheckpointFile, MutatedManifestsAreRefusedOrReadNotCrashedOn) {
  ckpt::Manifest m;
  m.model = "abc";
  m.grid = {1, 4};
  m.epAxes = {1};
  m.ranks = 4;
  m.tensors.push_back({"up", ckpt::Role::param, ckpt::Layout::experts, {2, 4}});
  const std::string valid = ckpt::encodeManifest(m);
  std::mt19937 rng(7);
  const std::string alphabet = "0123456789x -\nabcdefghijklmnopqrstuvwxyz_";
  int refused = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string text = valid;
    size_t at = rng() % text.size();
    if (rng() % 2)
      text[at] = alphabet[rng() % alphabet.size()];
    else
      text.erase(at, 1 + rng() % 6);
    ckpt::Manifest out;
    std::string error;
    bool ok = true;
    EXPECT_NO_THROW(ok = ckpt::decodeManifest(text, "manifest", out, error));
    if (!ok) {
      ++refused;
      EXPECT_EQ(error.rfind("checkpoint manifest 'manifest': ", 0), 0u);
    }
  }
  EXPECT_GT(refused, 5000);
}

/// A fresh directory under the test's temporary directory.
std::string scratchDir(const char *name) {
  return ::testing::TempDir() + "/moe-ckpt-" + name + "-" +
         std::to_string(::getpid());
}

TEST(CheckpointFile, CommitMovesLatestOnlyWhenComplete) {
  std::string root = scratchDir("commit"), error;
  ASSERT_TRUE(ckpt::makeDir(root, error)) << error;
  ckpt::Manifest m;
  m.model = "m";
  m.grid = {1, 2};
  m.ranks = 2;
  for (uint64_t step : {2u, 4u}) {
    m.counters.step = step;
    std::string staging = ckpt::stagingDir(root, step);
    ASSERT_TRUE(ckpt::makeDir(staging, error));
    ckpt::RankState s = sample();
    s.counters.step = step;
    ASSERT_TRUE(ckpt::writeAtomically(staging + "/rank0.bin",
                                      ckpt::encodeRank(s), error));
    if (step == 4) {
      // Rank 1 never wrote: the commit is refused, LATEST stays at 2.
      EXPECT_FALSE(ckpt::commit(root, m, error));
      EXPECT_NE(error.find("rank1.bin' is missing"), std::string::npos);
      std::string dir;
      ASSERT_TRUE(ckpt::latestDir(root, dir, error));
      EXPECT_EQ(dir, root + "/step-2");
      ckpt::removeTree(staging);
      continue;
    }
    ASSERT_TRUE(ckpt::writeAtomically(staging + "/rank1.bin",
                                      ckpt::encodeRank(s), error));
    ASSERT_TRUE(ckpt::commit(root, m, error)) << error;
  }
  std::string text;
  ASSERT_TRUE(ckpt::readWhole(root + "/step-2/manifest", text, error));
  ckpt::Manifest back;
  EXPECT_TRUE(ckpt::decodeManifest(text, "manifest", back, error)) << error;
  ckpt::removeTree(root + "/step-2");
  std::remove((root + "/LATEST").c_str());
  ::rmdir(root.c_str());
  EXPECT_FALSE(ckpt::latestDir(root, text, error));
  EXPECT_NE(error.find("no complete checkpoint"), std::string::npos);
}

/// Writes a committed checkpoint of `ranks` rank states under `root`.
void writeCheckpoint(const std::string &root, const ckpt::Manifest &m,
                     const std::vector<ckpt::RankState> &states) {
  std::string error;
  ASSERT_TRUE(ckpt::makeDir(root, error)) << error;
  ASSERT_TRUE(ckpt::makeDir(ckpt::stagingDir(root, m.counters.step), error));
  for (const ckpt::RankState &s : states)
    ASSERT_TRUE(ckpt::writeAtomically(ckpt::stagingDir(root, m.counters.step) +
                                          "/" + ckpt::rankFileName(s.rank),
                                      ckpt::encodeRank(s), error));
  ASSERT_TRUE(ckpt::commit(root, m, error)) << error;
}

/// A model with 8 experts of 3 values each and one replicated gain,
/// written on `grid` (EP over every axis): expert e holds e*10 + {0,1,2}.
ckpt::Manifest expertsOn(std::vector<int64_t> grid,
                         std::vector<ckpt::RankState> *states) {
  ckpt::Manifest m;
  m.grid = grid;
  for (size_t a = 0; a < grid.size(); ++a)
    m.epAxes.push_back(int64_t(a));
  m.ranks = 1;
  for (int64_t d : grid)
    m.ranks *= int(d);
  int64_t local = 8 / m.ranks;
  m.counters = {5, 5, 1};
  m.tensors.push_back({"gain", ckpt::Role::param, ckpt::Layout::replicated, {2}});
  m.tensors.push_back({"up", ckpt::Role::param, ckpt::Layout::experts, {local, 3}});
  m.tensors.push_back({"up.exp_avg", ckpt::Role::state, ckpt::Layout::experts, {local, 3}});
  m.model = ckpt::fingerprint(m);
  if (states)
    for (int r = 0; r < m.ranks; ++r) {
      ckpt::RankState s;
      s.rank = r;
      s.ranks = m.ranks;
      s.counters = m.counters;
      s.tensors.push_back({"gain", ckpt::Role::param, {2}, {1.5f, -2}});
      std::vector<float> up, avg;
      int64_t first = ckpt::expertIndex(grid, m.epAxes, r) * local;
      for (int64_t e = first; e < first + local; ++e)
        for (int j = 0; j < 3; ++j) {
          up.push_back(float(e * 10 + j));
          avg.push_back(float(-e));
        }
      s.tensors.push_back({"up", ckpt::Role::param, {local, 3}, up});
      s.tensors.push_back({"up.exp_avg", ckpt::Role::state, {local, 3}, avg});
      states->push_back(s);
    }
  return m;
}

TEST(CheckpointFile, ReshardsExpertsToAnotherGrid) {
  std::string root = scratchDir("reshard");
  std::vector<ckpt::RankState> states;
  ckpt::Manifest written = expertsOn({1, 4}, &states); // 2 experts a rank
  writeCheckpoint(root, written, states);
  for (std::vector<int64_t> grid :
       {std::vector<int64_t>{1, 2}, {2, 2}, {1, 8}, {1, 1}}) {
    ckpt::Manifest want = expertsOn(grid, nullptr);
    int64_t local = 8 / want.ranks;
    for (int r = 0; r < want.ranks; ++r) {
      ckpt::RankState got;
      std::string error;
      ASSERT_TRUE(ckpt::readResharded(root, want, r, got, error)) << error;
      EXPECT_EQ(got.counters.step, 5u);
      ASSERT_EQ(got.tensors.size(), 3u);
      EXPECT_EQ(got.tensors[0].values, (std::vector<float>{1.5f, -2}));
      int64_t first = ckpt::expertIndex(grid, want.epAxes, r) * local;
      ASSERT_EQ(got.tensors[1].values.size(), size_t(local * 3));
      for (int64_t e = 0; e < local; ++e)
        for (int j = 0; j < 3; ++j) {
          EXPECT_EQ(got.tensors[1].values[size_t(e * 3 + j)],
                    float((first + e) * 10 + j))
              << ckpt::formatShape(grid) << " rank " << r;
          EXPECT_EQ(got.tensors[2].values[size_t(e * 3 + j)], float(-(first + e)));
        }
    }
  }
  // 8 experts do not split over 3 ranks' worth of 2 experts each.
  ckpt::Manifest three = expertsOn({1, 4}, nullptr);
  three.grid = {1, 3};
  three.ranks = 3;
  ckpt::RankState got;
  std::string error;
  EXPECT_FALSE(ckpt::readResharded(root, three, 0, got, error));
  EXPECT_NE(error.find("tensor 'up' is param 2x3 (experts) on grid 1x4, which "
                       "does not map to param 2x3 on grid 1x3"),
            std::string::npos)
      << error;
  ckpt::removeTree(root + "/step-5");
  std::remove((root + "/LATEST").c_str());
  ::rmdir(root.c_str());
}

TEST(CheckpointFile, WholeModelGathersEveryRanksExpertsInOrder) {
  // What moe-export-onnx reads: a 2x2 checkpoint with EP over the second
  // axis (ranks 0, 2 hold experts 0-3, ranks 1, 3 experts 4-7), gathered
  // on one rank from the step directory itself.
  std::string root = scratchDir("whole");
  std::vector<ckpt::RankState> states;
  ckpt::Manifest written = expertsOn({2, 2}, nullptr);
  written.epAxes = {1};
  for (ckpt::LayoutEntry &e : written.tensors)
    if (e.layout == ckpt::Layout::experts)
      e.localShape[0] = 4;
  written.model = ckpt::fingerprint(written);
  for (int r = 0; r < 4; ++r) {
    ckpt::RankState s;
    s.rank = r;
    s.ranks = 4;
    s.counters = written.counters;
    s.tensors.push_back({"gain", ckpt::Role::param, {2}, {1.5f, -2}});
    std::vector<float> up, avg;
    for (int64_t e = (r % 2) * 4; e < (r % 2) * 4 + 4; ++e)
      for (int j = 0; j < 3; ++j) {
        up.push_back(float(e * 10 + j));
        avg.push_back(float(-e));
      }
    s.tensors.push_back({"up", ckpt::Role::param, {4, 3}, up});
    s.tensors.push_back({"up.exp_avg", ckpt::Role::state, {4, 3}, avg});
    states.push_back(s);
  }
  writeCheckpoint(root, written, states);
  ckpt::Manifest whole = ckpt::wholeModel(written);
  EXPECT_EQ(whole.ranks, 1);
  EXPECT_EQ(whole.tensors[1].localShape, (std::vector<int64_t>{8, 3}));
  std::string dir, error;
  ASSERT_TRUE(ckpt::checkpointDir(root, dir, error)) << error;
  EXPECT_EQ(dir, root + "/step-5");
  std::string same;
  ASSERT_TRUE(ckpt::checkpointDir(dir, same, error)) << error;
  EXPECT_EQ(same, dir);
  ckpt::RankState got;
  ASSERT_TRUE(ckpt::readReshardedAt(dir, whole, 0, got, error)) << error;
  ASSERT_EQ(got.tensors[1].values.size(), 24u);
  for (int64_t e = 0; e < 8; ++e)
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(got.tensors[1].values[size_t(e * 3 + j)], float(e * 10 + j));
  // A data-parallel copy that drifted (rank 2 holds rank 0's experts).
  states[2].tensors[1].values[0] = 99;
  ckpt::removeTree(dir);
  writeCheckpoint(root, written, states);
  EXPECT_FALSE(ckpt::readReshardedAt(dir, whole, 0, got, error));
  EXPECT_NE(error.find("tensor 'up' differs between rank 2 and another rank "
                       "holding the same experts"),
            std::string::npos)
      << error;
  ckpt::removeTree(dir);
  std::remove((root + "/LATEST").c_str());
  ::rmdir(root.c_str());
}

TEST(CheckpointFile, ReshardingChecksReplicasEqual) {
  std::string root = scratchDir("replicas");
  std::vector<ckpt::RankState> states;
  ckpt::Manifest written = expertsOn({1, 4}, &states);
  states[2].tensors[0].values[1] = 7; // rank 2's gain drifted
  writeCheckpoint(root, written, states);
  ckpt::RankState got;
  std::string error;
  EXPECT_FALSE(ckpt::readResharded(root, expertsOn({1, 2}, nullptr), 0, got,
                                   error));
  EXPECT_NE(error.find("tensor 'gain' differs between rank 2 and another "
                       "rank holding the same replica"),
            std::string::npos)
      << error;
  ckpt::removeTree(root + "/step-5");
  std::remove((root + "/LATEST").c_str());
  ::rmdir(root.c_str());
}

TEST(CheckpointFile, PlacementAndBlocksRoundTrip) {
  ckpt::Manifest m = expertsOn({1, 4}, nullptr);
  m.tensors[1].block = m.tensors[2].block = 3;
  m.placement[3] = {1, 3, 4, 7, 0, 2, 5, 6};
  std::string text = ckpt::encodeManifest(m), error;
  EXPECT_NE(text.find("placement 3 1,3,4,7,0,2,5,6\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("up param experts 2x3 block 3\n"), std::string::npos)
      << text;
  ckpt::Manifest back;
  ASSERT_TRUE(ckpt::decodeManifest(text, "manifest", back, error)) << error;
  EXPECT_EQ(back.placement, m.placement);
  EXPECT_EQ(back.tensors[0].block, -1);
  EXPECT_EQ(back.tensors[1].block, 3);
  // The block is not part of the fingerprint: a step's fingerprint does
  // not change with placement.
  EXPECT_EQ(ckpt::fingerprint(back), ckpt::fingerprint(expertsOn({1, 4}, nullptr)));
  // A table that is not a permutation is refused, naming the line.
  std::string bad = text;
  bad.replace(bad.find("1,3,4,7"), 7, "1,3,4,1");
  EXPECT_FALSE(ckpt::decodeManifest(bad, "manifest", back, error));
  EXPECT_NE(error.find("bad placement line 'placement 3 1,3,4,1,0,2,5,6'"),
            std::string::npos)
      << error;
}

TEST(CheckpointFile, ReshardingFollowsTheExpertPlacement) {
  // Written on 1x4 under a placement of block 0: slot j holds expert
  // table[j]. Read on 1x2 without one, and gathered whole (what
  // moe-export-onnx reads), the experts come back in expert order; read on
  // 1x2 under another placement, each slot gets its expert.
  std::string root = scratchDir("placed");
  std::vector<int64_t> table = {1, 3, 4, 7, 0, 2, 5, 6};
  std::vector<ckpt::RankState> states;
  ckpt::Manifest written = expertsOn({1, 4}, &states);
  written.tensors[1].block = written.tensors[2].block = 0;
  written.placement[0] = table;
  for (ckpt::RankState &s : states)
    for (int k = 1; k <= 2; ++k)
      for (int64_t j = 0; j < 2; ++j)
        for (int i = 0; i < 3; ++i) {
          int64_t e = table[size_t(s.rank * 2 + j)];
          s.tensors[size_t(k)].values[size_t(j * 3 + i)] =
              k == 1 ? float(e * 10 + i) : float(-e);
        }
  writeCheckpoint(root, written, states);
  std::vector<int64_t> other = {7, 6, 5, 4, 3, 2, 1, 0};
  for (const std::vector<int64_t> &want : {std::vector<int64_t>{}, other}) {
    ckpt::Manifest two = expertsOn({1, 2}, nullptr);
    two.tensors[1].block = two.tensors[2].block = 0;
    if (!want.empty())
      two.placement[0] = want;
    for (int r = 0; r < 2; ++r) {
      ckpt::RankState got;
      std::string error;
      ASSERT_TRUE(ckpt::readResharded(root, two, r, got, error)) << error;
      EXPECT_EQ(got.placement, two.placement);
      for (int64_t j = 0; j < 4; ++j) {
        int64_t e = want.empty() ? r * 4 + j : want[size_t(r * 4 + j)];
        for (int i = 0; i < 3; ++i)
          EXPECT_EQ(got.tensors[1].values[size_t(j * 3 + i)], float(e * 10 + i))
              << "rank " << r << " slot " << j;
        EXPECT_EQ(got.tensors[2].values[size_t(j * 3)], float(-e));
      }
    }
  }
  std::string dir, error;
  ASSERT_TRUE(ckpt::checkpointDir(root, dir, error)) << error;
  ckpt::RankState whole;
  ASSERT_TRUE(ckpt::readReshardedAt(dir, ckpt::wholeModel(written), 0, whole,
                                    error))
      << error;
  for (int64_t e = 0; e < 8; ++e)
    EXPECT_EQ(whole.tensors[1].values[size_t(e * 3)], float(e * 10));
  // On its own grid the state stays in the checkpoint's placement, which
  // the reader reports.
  ckpt::RankState same;
  ASSERT_TRUE(ckpt::readResharded(root, written, 1, same, error)) << error;
  EXPECT_EQ(same.placement, written.placement);
  EXPECT_EQ(same.tensors[1].values[0], float(table[2] * 10));
  ckpt::removeTree(root + "/step-5");
  std::remove((root + "/LATEST").c_str());
  ::rmdir(root.c_str());
}

} // namespace
