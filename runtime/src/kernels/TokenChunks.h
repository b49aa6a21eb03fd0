//===- TokenChunks.h - variable-count token chunks and slot maps -*- C++ -*-===//
//
// The index rules of the variable-count routing ops that both backends
// apply row by row, so that the CPU kernels (VarRouting.h,
// src/cpu/CpuVarRoutingOps.cpp) and the CUDA bodies (src/device/
// VarRoutingOps.h, TokenChunkOps.h) cut, re-cut and map rows by one
// definition, hence host-and-device:
//  - a token chunk: of the c rows one rank sends one expert (GShard
//    order), chunk `part` of `parts` is the run partRange(c, part, parts);
//  - a chunk's packed rows: chunkCut / keptRow (moe_rt_dispatch_v_part);
//  - the re-cut of forward chunks into a backward one: windowBlocks
//    (moe_rt_rows_window);
//  - the expert placement: physicalExpert (moe.dispatch's expert_slots).
// Plain C++ with no allocation: the host tests (DeviceVarRoutingTest)
// run exactly what a GPU runs, against the CPU ops.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_TOKENCHUNKS_H
#define MOE_RT_KERNELS_TOKENCHUNKS_H

#include <cstdint>

#if defined(__CUDACC__)
#define MOE_RT_CHUNK_HD __host__ __device__
#else
#define MOE_RT_CHUNK_HD
#endif

namespace moe_rt::kernels {

/// Token chunk `part` of `parts` of `count` rows: the part-th of `parts`
/// contiguous runs, sizes differing by at most one, [first, end).
struct PartRange {
  int64_t first, end;
  MOE_RT_CHUNK_HD int64_t size() const { return end - first; }
};
MOE_RT_CHUNK_HD inline PartRange partRange(int64_t count, int64_t part,
                                           int64_t parts) {
  return {part * count / parts, (part + 1) * count / parts};
}

/// Cuts every expert's `counts` (E, this rank's rows per expert, packed
/// expert-major) to chunk `part` of `parts`, in place, and records what
/// keptRow needs: offset[e] (where expert e's rows started before the
/// cut), first[e] (the chunk's first slot of e) and kept[e] (where e's
/// kept rows start after it). Sequential over the experts (E is small).
MOE_RT_CHUNK_HD inline void chunkCut(int64_t experts, int64_t part,
                                     int64_t parts, int64_t *counts,
                                     int64_t *offset, int64_t *first,
                                     int64_t *kept) {
  int64_t full = 0, cut = 0;
  for (int64_t e = 0; e < experts; ++e) {
    PartRange range = partRange(counts[e], part, parts);
    offset[e] = full;
    kept[e] = cut;
    first[e] = range.first;
    full += counts[e];
    counts[e] = range.size();
    cut += counts[e];
  }
}

/// A (token, choice)'s packed row in the chunk, from its packed row `pos`
/// before the cut (-1: none) and its expert `e` (chunkCut's tables): its
/// slot pos - offset[e] kept when inside the chunk's run, else -1 (it
/// travels in another chunk).
MOE_RT_CHUNK_HD inline int64_t keptRow(int64_t pos, int64_t e,
                                       const int64_t *counts,
                                       const int64_t *offset,
                                       const int64_t *first,
                                       const int64_t *kept) {
  if (pos < 0)
    return -1;
  int64_t slot = pos - offset[e];
  return slot >= first[e] && slot < first[e] + counts[e]
             ? kept[e] + slot - first[e]
             : -1;
}

/// One (local expert, source rank) block of moe_rt_rows_window: its rows
/// start at `from` in the forward chunk's buffer and at `to` in the
/// backward chunk's; of the block's whole count it holds the slots `have`
/// there and `want` here.
struct WindowBlock {
  int64_t from, to;
  PartRange have, want;
};

/// The blocks of one local expert, source ranks in order (G of them):
/// `total[g]` the block's whole count, `chunkRows[g]` what the forward
/// chunk `fromPart` of `fromParts` holds of it; `chunkCap` / `outCap` the
/// buffers' rows. Returns the first g whose chunk rows are not that chunk
/// of the total or overflow a buffer, else -1 (blocks[0..G) filled).
MOE_RT_CHUNK_HD inline int64_t
windowBlocks(int64_t G, const int64_t *total, const int64_t *chunkRows,
             int64_t chunkCap, int64_t outCap, int64_t fromPart,
             int64_t fromParts, int64_t part, int64_t parts,
             WindowBlock *blocks) {
  int64_t from = 0, to = 0;
  for (int64_t g = 0; g < G; ++g) {
    WindowBlock b{from, to, partRange(total[g], fromPart, fromParts),
                  partRange(total[g], part, parts)};
    if (chunkRows[g] != b.have.size() || from + chunkRows[g] > chunkCap ||
        to + b.want.size() > outCap)
      return g;
    blocks[g] = b;
    from += b.have.size();
    to += b.want.size();
  }
  return -1;
}

/// The forward chunk's row holding row `q` of block b in the backward
/// chunk (0 <= q < b.want.size()), or -1 when another forward chunk holds
/// it.
MOE_RT_CHUNK_HD inline int64_t windowSource(const WindowBlock &b, int64_t q) {
  int64_t slot = b.want.first + q;
  return slot >= b.have.first && slot < b.have.end
             ? b.from + slot - b.have.first
             : -1;
}

/// A routing choice as a physical expert id under an expert placement
/// (`phys[e]`: the slot g E_l + s holding logical expert e); ids outside
/// [0, E) are kept, so the layouts refuse them by their own words.
MOE_RT_CHUNK_HD inline int64_t physicalExpert(int64_t e, int64_t experts,
                                              const int64_t *phys) {
  return e >= 0 && e < experts ? phys[e] : e;
}

} // namespace moe_rt::kernels

#undef MOE_RT_CHUNK_HD

#endif // MOE_RT_KERNELS_TOKENCHUNKS_H
