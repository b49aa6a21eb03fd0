//===- CpuShardRowsOps.cpp - all-gather-v / reduce-scatter-v of rows ------===//
//
// moe_rt_gather_rows, moe_rt_scatter_rows and their vjps on a CPU stream.
// Every call exchanges the ranks' E_l x G counts first (an all-gather of
// integers), so every rank plans the data collective from the same counts:
// a count over the bound fails every rank with the same message and moves
// nothing (no rank is left waiting); gathered counts given as an operand
// that disagree with the exchanged ones fail the rank that holds them,
// after a collective planned from the exchanged counts (the others do not
// wait for it either).
//
//===----------------------------------------------------------------------===//

#include "CpuShardRowsOps.h"

#include "CpuTasks.h"

#include "../mpi/MpiCollectives.h"

#include <memory>
#include <string>
#include <vector>

namespace moe_rt::cpu {
namespace {
using shardrows::Shape;

struct RowsState {
  std::vector<int64_t> mine, all, n;
  std::vector<float> send, recv;
  std::shared_ptr<mpi::VPlan> plan = std::make_shared<mpi::VPlan>();
  std::string error;

  explicit RowsState(const Shape &s)
      : mine(s.El * s.G), all(s.S * s.El * s.G),
        send(s.El * s.R * s.M), recv(s.El * s.R * s.M) {
    plan->count.assign(s.S, 0);
    plan->offset.assign(s.S, 0);
  }
  void fail(const std::string &why) {
    if (error.empty())
      error = why;
  }
};

} // namespace

moe_rt_status shardRows(moe_rt_stream s, moe_rt_comm comm, const char *call,
                        const Shape &sh, bool rowsGathered, bool gather,
                        const int64_t *rows, const float *in, float *out,
                        int64_t *gatheredRows) {
  auto st = std::make_shared<RowsState>(sh);
  if (rowsGathered)
    if (moe_rt_status e = task(
            s, [=] { shardrows::ownRows(sh, rows, st->mine.data()); }))
      return e;
  const int64_t *mine = rowsGathered ? st->mine.data() : rows;
  if (moe_rt_status e = mpi::allGatherCounts(s, comm, mine, st->all.data(),
                                             sh.El * sh.G))
    return e;
  if (moe_rt_status e = task(s, [=] {
        std::string why = shardrows::runs(sh, st->all.data(), st->n);
        if (!why.empty()) {
          // The same on every rank: all move nothing.
          st->fail(why);
          st->n.assign(sh.S * sh.El, 0);
        } else if (rowsGathered) {
          st->fail(shardrows::sameCounts(sh, rows, st->all.data()));
        }
        if (gatheredRows) {
          if (st->error.empty())
            shardrows::gatheredRows(sh, st->all.data(), gatheredRows);
          else // what reads them next computes nothing
            std::fill(gatheredRows, gatheredRows + sh.El * sh.S * sh.G, 0);
        }
        shardrows::wire(sh, st->n, st->plan->count, st->plan->offset);
        float *wire = st->send.data();
        if (gather)
          shardrows::copyRuns(sh, st->n, sh.rank, false, true,
                              const_cast<float *>(in), wire);
        else
          for (int64_t g = 0; g < sh.S; ++g)
            shardrows::copyRuns(sh, st->n, g, true, true,
                                const_cast<float *>(in),
                                wire + st->plan->offset[g]);
      }))
    return e;
  std::shared_ptr<const mpi::VPlan> plan = st->plan;
  if (moe_rt_status e =
          gather ? mpi::allGatherVPlanned(s, comm, plan, st->send.data(),
                                          st->recv.data())
                 : mpi::reduceScatterVPlanned(s, comm, plan, st->send.data(),
                                              st->recv.data()))
    return e;
  return finishOp(s, call, st, [=] {
    if (gather)
      for (int64_t g = 0; g < sh.S; ++g)
        shardrows::copyRuns(sh, st->n, g, true, false, out,
                            st->recv.data() + st->plan->offset[g]);
    else
      shardrows::copyRuns(sh, st->n, sh.rank, false, false, out,
                          st->recv.data());
    shardrows::zeroTail(sh, shardrows::filled(sh, st->n, gather), out);
  });
}

} // namespace moe_rt::cpu
