//===- ChunkingTest.cpp - S_p chunk plans and byte sizes ------------------===//

#include "moe/Analysis/Chunking.h"

#include <gtest/gtest.h>

#include <random>

using namespace mlir;
using namespace mlir::moe;

namespace {

// FlowMoE §3.3 chunking, checked against its definition on random inputs:
// every byte of every tensor is carried exactly once and in order, no chunk
// exceeds S_p, a tensor of at least S_p bytes is cut into ceil(size/S_p)
// ranges, and smaller tensors are packed greedily (a packed chunk could not
// take the next small tensor).
TEST(Chunking, PlanMatchesTheDefinitionOnRandomInputs) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    int64_t chunk = 4 * (1 + rng() % 64);
    std::vector<int64_t> sizes(1 + rng() % 8);
    for (int64_t &s : sizes)
      s = 4 * (1 + rng() % 80);
    SmallVector<GradientChunk> plan = planChunks(sizes, chunk);

    std::vector<int64_t> covered(sizes.size(), 0), ranges(sizes.size(), 0);
    unsigned lastTensor = 0;
    for (auto [i, c] : llvm::enumerate(plan)) {
      ASSERT_FALSE(c.tensors.empty());
      ASSERT_GE(c.tensors.front(), lastTensor) << "order kept";
      lastTensor = c.tensors.back();
      if (c.isRange()) {
        ASSERT_EQ(c.tensors.size(), 1u);
        unsigned t = c.tensors[0];
        ASSERT_GE(sizes[t], chunk) << "only large tensors are cut";
        ASSERT_EQ(c.offset, covered[t]) << "ranges are contiguous";
        ASSERT_LE(c.size, chunk);
        ASSERT_GT(c.size, 0);
        covered[t] += c.size;
        ++ranges[t];
      } else {
        int64_t total = 0;
        for (unsigned t : c.tensors) {
          ASSERT_LT(sizes[t], chunk) << "large tensors are never packed";
          ASSERT_EQ(covered[t], 0);
          covered[t] = sizes[t];
          total += sizes[t];
        }
        ASSERT_LE(total, chunk);
        // Greedy: the next tensor, if small and packed later, did not fit.
        unsigned next = c.tensors.back() + 1;
        if (next < sizes.size() && sizes[next] < chunk) {
          ASSERT_GT(total + sizes[next], chunk);
        }
      }
    }
    for (size_t t = 0; t < sizes.size(); ++t) {
      ASSERT_EQ(covered[t], sizes[t]) << "every byte carried once";
      if (sizes[t] >= chunk) {
        ASSERT_EQ(ranges[t], (sizes[t] + chunk - 1) / chunk);
      }
    }
  }
}

TEST(Chunking, KnownCases) {
  // One tensor smaller than a chunk: one whole-tensor chunk.
  auto small = planChunks({400}, 1024);
  ASSERT_EQ(small.size(), 1u);
  EXPECT_FALSE(small[0].isRange());
  // A size that is not a multiple: the last range is shorter.
  auto odd = planChunks({1200}, 512);
  ASSERT_EQ(odd.size(), 3u);
  EXPECT_EQ(odd[2].offset, 1024);
  EXPECT_EQ(odd[2].size, 176);
  // An exact multiple: equal ranges.
  auto exact = planChunks({2048}, 512);
  ASSERT_EQ(exact.size(), 4u);
  EXPECT_EQ(exact[3].offset, 1536);
  EXPECT_EQ(exact[3].size, 512);
  EXPECT_TRUE(planChunks({}, 512).empty());
}

// FSMoE §5 slicing by hand: tensors of 16, 8 and 12 bytes (4-byte
// elements) cut at 10 (inside the first: down to 8), 10 (an empty slice)
// and 30 (inside the third, at its 6th byte: down to 4).
TEST(Chunking, SlicesTheReadyOrderedStreamByHand) {
  auto pieces = sliceStream({16, 8, 12}, {4, 4, 4}, {10, 10, 30});
  struct Want {
    unsigned tensor, slice;
    int64_t offset, size;
  };
  std::vector<Want> want = {{0, 0, 0, 8}, {0, 2, 8, 8}, {1, 2, 0, 8},
                            {2, 2, 0, 4}, {2, 3, 4, 8}};
  ASSERT_EQ(pieces.size(), want.size());
  for (auto [p, w] : llvm::zip(pieces, want)) {
    EXPECT_EQ(p.tensor, w.tensor);
    EXPECT_EQ(p.slice, w.slice);
    EXPECT_EQ(p.offset, w.offset);
    EXPECT_EQ(p.size, w.size);
  }
}

// On random inputs: every byte exactly once, in stream order, slices
// non-decreasing, no byte in a slice before the one its cut allows
// (causality: a piece of slice i ends at or before cuts[i]), pieces on
// element boundaries.
TEST(Chunking, SlicesKeepEveryByteAndNeverMoveOneEarlier) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int64_t> bytes, elements;
    int64_t total = 0;
    for (int t = 0, n = 1 + rng() % 6; t < n; ++t) {
      int64_t e = int64_t(1) << (rng() % 4);
      elements.push_back(e);
      bytes.push_back(e * (rng() % 20));
      total += bytes.back();
    }
    std::vector<int64_t> cuts;
    for (int i = 0, n = rng() % 5; i < n; ++i)
      cuts.push_back(total ? int64_t(rng() % (total + 1)) : 0);
    llvm::sort(cuts);
    auto pieces = sliceStream(bytes, elements, cuts);
    int64_t stream = 0, start = 0;
    unsigned tensor = 0, slice = 0;
    for (const TensorPiece &p : pieces) {
      while (tensor < p.tensor)
        start += bytes[tensor++];
      ASSERT_EQ(tensor, p.tensor);
      EXPECT_EQ(start + p.offset, stream) << "trial " << trial;
      EXPECT_GT(p.size, 0);
      EXPECT_EQ(p.offset % elements[p.tensor], 0);
      EXPECT_EQ(p.size % elements[p.tensor], 0);
      EXPECT_GE(p.slice, slice);
      slice = p.slice;
      if (p.slice < cuts.size())
        EXPECT_LE(stream + p.size, cuts[p.slice]);
      stream += p.size;
    }
    EXPECT_EQ(stream, total);
  }
}

TEST(Chunking, ParsesByteSizes) {
  EXPECT_EQ(parseByteSize("1048576"), 1048576);
  EXPECT_EQ(parseByteSize("512KiB"), 512 * 1024);
  EXPECT_EQ(parseByteSize("2MiB"), 2 * 1024 * 1024);
  EXPECT_EQ(parseByteSize("1GiB"), int64_t(1) << 30);
  EXPECT_EQ(parseByteSize("4MB"), 4000000);
  EXPECT_EQ(parseByteSize("64KB"), 64000);
  EXPECT_EQ(parseByteSize(" 8 B "), 8);
  for (const char *bad : {"", "0", "-4", "MiB", "2 parsecs", "1.5MiB",
                          "99999999999999999999", "9000000000GiB"})
    EXPECT_EQ(parseByteSize(bad), std::nullopt) << bad;
}

} // namespace
