//===- TokenChunkOps.h - re-cutting variable-count token chunks -*- C++ -*-===//
//
// moe_rt_rows_sum / moe_rt_rows_window / moe_rt_rows_part (moe.rows_window:
// the backward's chunk part of parts from the forward's chunks) for the
// CUDA backend, written over an executor (Device.h) and a link with
// toHost (VarRoutingOps.h's concept) so that the host tests run them
// (tests/DeviceVarRoutingTest.cpp). The index rules are
// kernels/TokenChunks.h's, which the CPU op (src/cpu/CpuVarRoutingOps.cpp)
// applies too.
//
// rows_window reads its two E_l x G tables to the host (a stream wait)
// and checks them there with varplan::windowBlocks, so that a table that
// is not the forward chunk's fails with the CPU op's words, naming the
// entry; the copy itself is one body per element of `out`.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_DEVICE_TOKENCHUNKOPS_H
#define MOE_RT_SRC_DEVICE_TOKENCHUNKOPS_H

#include "Device.h"

#include "../Error.h"
#include "../OpShapes.h"
#include "../VarRoutePlan.h"
#include "../kernels/TokenChunks.h"

#include "moe_rt/moe_rt.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe_rt::device {

namespace tokenchunks {

/// total[i] = rows[i], or += rows[i].
struct RowsSum {
  const int64_t *rows;
  int64_t *total;
  bool accumulate;
  MOE_HD void operator()(int64_t i) const {
    total[i] = (accumulate ? total[i] : 0) + rows[i];
  }
};

/// rows[i] -> the size of its chunk part of parts.
struct RowsPart {
  int64_t part, parts;
  int64_t *rows;
  MOE_HD void operator()(int64_t i) const {
    rows[i] = kernels::partRange(rows[i], part, parts).size();
  }
};

/// One element i of out (E_l x outRows x M): the forward chunk's row that
/// holds it (kernels::windowSource), copied; left as it is when another
/// forward chunk holds it or no block reaches it (the CPU op's copy).
struct WindowRows {
  int64_t G, chunkRows, outRows, M;
  const kernels::WindowBlock *blocks; // E_l x G
  const float *chunk;
  float *out;
  MOE_HD void operator()(int64_t i) const {
    int64_t col = i % M, q = i / M, row = q % outRows, l = q / outRows;
    for (int64_t g = 0; g < G; ++g) {
      const kernels::WindowBlock &b = blocks[l * G + g];
      if (row < b.to || row >= b.to + b.want.size())
        continue;
      int64_t src = kernels::windowSource(b, row - b.to);
      if (src >= 0)
        out[i] = chunk[(l * chunkRows + src) * M + col];
      return;
    }
  }
};

} // namespace tokenchunks

/// moe_rt_rows_sum: total (n entries) = rows, or += rows.
template <class X>
moe_rt_status rowsSum(X &ex, int64_t n, const int64_t *rows, int64_t *total,
                      bool accumulate) {
  return ex.forEach(n, tokenchunks::RowsSum{rows, total, accumulate});
}

/// moe_rt_rows_part: rows (n entries) -> chunk part of parts, in place.
template <class X>
moe_rt_status rowsPart(X &ex, int64_t n, int64_t part, int64_t parts,
                       int64_t *rows) {
  return ex.forEach(n, tokenchunks::RowsPart{part, parts, rows});
}

/// moe_rt_rows_window: the rows forward chunk w.fromPart (`chunk`, its
/// rows `chunkRows`) shares with backward chunk w.part, copied into `out`.
template <class X, class L>
moe_rt_status rowsWindow(X &ex, L &link, const RowsWindowShape &w,
                         const int64_t *total, const int64_t *chunkRows,
                         const float *chunk, float *out) {
  int64_t n = w.El * w.G;
  std::vector<int64_t> hostTotal(n), hostChunk(n);
  if (moe_rt_status st =
          link.toHost(hostTotal.data(), total, sizeof(int64_t) * n))
    return st;
  if (moe_rt_status st =
          link.toHost(hostChunk.data(), chunkRows, sizeof(int64_t) * n))
    return st;
  std::vector<kernels::WindowBlock> blocks(n);
  for (int64_t l = 0; l < w.El; ++l) {
    const int64_t *t = hostTotal.data() + l * w.G,
                  *c = hostChunk.data() + l * w.G;
    if (int64_t g = varplan::windowBlocks(w, t, c, blocks.data() + l * w.G);
        g >= 0)
      return fail(MOE_RT_INVALID_ARGUMENT,
                  "moe_rt_rows_window: " + varplan::windowFault(w, l, g, t, c));
  }
  static_assert(sizeof(kernels::WindowBlock) == 6 * sizeof(int64_t),
                "WindowBlock travels as six int64 words");
  int64_t *words = ex.scratchI64(6 * n);
  if (ex.status())
    return ex.status();
  if (moe_rt_status st = link.toDevice(words, blocks.data(),
                                       sizeof(kernels::WindowBlock) * n))
    return st;
  return ex.forEach(
      w.El * w.outRows * w.M,
      tokenchunks::WindowRows{
          w.G, w.chunkRows, w.outRows, w.M,
          reinterpret_cast<const kernels::WindowBlock *>(words), chunk, out});
}

} // namespace moe_rt::device

#endif // MOE_RT_SRC_DEVICE_TOKENCHUNKOPS_H
