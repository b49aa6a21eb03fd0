//===- ShardRowsOps.cpp - expert sharding's variable-count collectives ----===//
//
// moe_rt_gather_rows / moe_rt_scatter_rows and their vjps (ops.h;
// moe.gather_rows / moe.scatter_rows): checks, then the CPU backend
// (src/cpu/CpuShardRowsOps.cpp). CUDA streams are refused: the NCCL path
// is not written yet (docs/passes/moe-expert-sharding.md).
//
//===----------------------------------------------------------------------===//

#include "OpChecks.h"

#include "../cpu/CpuShardRowsOps.h"

#include <string>

using namespace moe_rt;

namespace {

/// Checks a rows collective: `part` the rank's expert side and `whole` the
/// gathered one (both E_l x R x M), `rows` E_l x G (`rowsGathered`: E_l x
/// S·G), `gatheredRows` E_l x S·G when given; fills `shape`.
moe_rt_status rowsCall(const char *call, moe_rt_stream s, moe_rt_comm comm,
                       int64_t block, bool rowsGathered, bool gather,
                       const moe_rt_tensor *rows, const moe_rt_tensor *in,
                       moe_rt_tensor *out, moe_rt_tensor *gatheredRows) {
  Check c{call, backendOf(s)};
  c.that(s != nullptr && comm != nullptr, "NULL stream or group")
      .tensor(in, "the input", MOE_RT_F32, 3)
      .tensor(out, "the output", MOE_RT_F32, 3)
      .tensor(rows, "rows", MOE_RT_I64, 2)
      .tensor(gatheredRows, "gathered_rows", MOE_RT_I64, 2, true);
  if (c.status)
    return c.status;
  c.that(backendOf(s) != MOE_RT_CUDA,
         "expert sharding of variable-count rows runs on CPU streams only")
      .that(in->rank == 3 && out->rank == 3 && dim(in, 0) == dim(out, 0) &&
                dim(in, 1) == dim(out, 1) && dim(in, 2) == dim(out, 2),
            "the input and the output must both be E_l x R x M")
      .that(dim(rows, 0) == dim(in, 0), "rows must have E_l rows");
  if (c.status)
    return c.status;
  shardrows::Shape sh;
  sh.S = moe_rt_comm_size(comm);
  sh.rank = moe_rt_comm_rank(comm);
  sh.El = dim(in, 0);
  sh.R = dim(in, 1);
  sh.M = dim(in, 2);
  sh.block = block;
  sh.G = rowsGathered ? dim(rows, 1) / sh.S : dim(rows, 1);
  c.that(!rowsGathered || dim(rows, 1) == sh.G * sh.S,
         "the gathered rows' " + std::to_string(dim(rows, 1)) +
             " columns do not divide over the group's " +
             std::to_string(sh.S) + " ranks")
      .that(!gatheredRows || (dim(gatheredRows, 0) == sh.El &&
                              dim(gatheredRows, 1) == sh.S * sh.G),
            "gathered_rows must be E_l x S·G");
  if (c.status)
    return c.status;
  return cpu::shardRows(s, comm, call, sh, rowsGathered, gather, i64(rows),
                        f32(in), f32(out),
                        gatheredRows ? i64(gatheredRows) : nullptr);
}

} // namespace

extern "C" {

moe_rt_status moe_rt_gather_rows(moe_rt_stream s, moe_rt_comm comm,
                                 int64_t block, const moe_rt_tensor *in,
                                 const moe_rt_tensor *rows, moe_rt_tensor *out,
                                 moe_rt_tensor *gathered_rows) {
  if (!gathered_rows)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_gather_rows: gathered_rows is NULL");
  return rowsCall("moe_rt_gather_rows", s, comm, block, false, true, rows, in,
                  out, gathered_rows);
}

moe_rt_status moe_rt_gather_rows_grad(moe_rt_stream s, moe_rt_comm comm,
                                      int64_t block, const moe_rt_tensor *rows,
                                      const moe_rt_tensor *dout,
                                      moe_rt_tensor *dx) {
  return rowsCall("moe_rt_gather_rows_grad", s, comm, block, false, false,
                  rows, dout, dx, nullptr);
}

moe_rt_status moe_rt_scatter_rows(moe_rt_stream s, moe_rt_comm comm,
                                  int64_t block,
                                  const moe_rt_tensor *gathered_rows,
                                  const moe_rt_tensor *in,
                                  moe_rt_tensor *out) {
  return rowsCall("moe_rt_scatter_rows", s, comm, block, true, false,
                  gathered_rows, in, out, nullptr);
}

moe_rt_status moe_rt_scatter_rows_grad(moe_rt_stream s, moe_rt_comm comm,
                                       int64_t block,
                                       const moe_rt_tensor *gathered_rows,
                                       const moe_rt_tensor *dout,
                                       moe_rt_tensor *dx) {
  return rowsCall("moe_rt_scatter_rows_grad", s, comm, block, true, true,
                  gathered_rows, dout, dx, nullptr);
}

} // extern "C"
