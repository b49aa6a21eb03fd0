//===- MpiCollectives.cpp - the collectives over MPI, on CPU streams ------===//

#include "MpiCollectives.h"

#include "../Error.h"
#include "CollectiveSteps.h"

#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace moe_rt;
using namespace moe_rt::coll;

namespace moe_rt::mpi {

namespace {
/// What a one-rank group's collective moves: n elements to itself (the
/// buffers may be one).
template <typename T> void copyToSelf(const T *in, T *out, int64_t n) {
  if (n > 0 && in != out)
    std::memmove(out, in, size_t(n) * sizeof(T));
}

/// A one-rank group's all-to-all(-v): its block to itself.
void copySelf(const PeerPlan &plan, const float *in, float *out) {
  if (!plan.sendCount.empty())
    copyToSelf(in + plan.sendOffset[0], out + plan.recvOffset[0],
               plan.sendCount[0]);
}
} // namespace

moe_rt_status allReduce(moe_rt_stream stream, moe_rt_comm comm, float *data,
                        int64_t count, const char *what) {
  if (count > std::numeric_limits<int>::max())
    return fail(MOE_RT_INVALID_ARGUMENT,
                std::string(what) + ": more elements than MPI's int counts");
  int n = static_cast<int>(count);
  return enqueueCollective(
      stream, comm, comm->ar, AllReduce, count * 4, lowPriority(AllReduce),
      [data, n, comm](MPI_Request *r) {
        return MPI_Iallreduce(MPI_IN_PLACE, data, n, MPI_FLOAT, MPI_SUM,
                              comm->ar, r);
      },
      [] {}); // one rank: the sum is the data
}

moe_rt_status allToAll(moe_rt_stream stream, moe_rt_comm comm, int64_t kind,
                       int64_t bytes, const float *in, float *out,
                       const PeerPlan &plan, const char *what) {
  if (!fitsInt(plan))
    return fail(MOE_RT_INVALID_ARGUMENT,
                std::string(what) + ": counts exceed MPI's int counts");
  auto toInt = [](const std::vector<int64_t> &v) {
    return std::vector<int>(v.begin(), v.end());
  };
  std::vector<int> sc = toInt(plan.sendCount), sd = toInt(plan.sendOffset),
                   rc = toInt(plan.recvCount), rd = toInt(plan.recvOffset);
  if (kind == AllToAll) {
    int part = sc.empty() ? 0 : sc[0];
    return enqueueCollective(
        stream, comm, comm->a2a, kind, bytes, false, [=](MPI_Request *r) {
          return MPI_Ialltoall(in, part, MPI_FLOAT, out, part, MPI_FLOAT,
                               comm->a2a, r);
        },
        [=] { copySelf(plan, in, out); });
  }
  return enqueueCollective(
      stream, comm, comm->a2a, kind, bytes, false, [=](MPI_Request *r) {
        return MPI_Ialltoallv(in, sc.data(), sd.data(), MPI_FLOAT, out,
                              rc.data(), rd.data(), MPI_FLOAT, comm->a2a, r);
      },
      [=] { copySelf(plan, in, out); });
}

moe_rt_status allGather(moe_rt_stream stream, moe_rt_comm comm,
                        const float *in, float *out, int64_t n) {
  return enqueueCollective(
      stream, comm, comm->a2a, AllGather, n * 4, false, [=](MPI_Request *r) {
        return MPI_Iallgather(in, int(n), MPI_FLOAT, out, int(n), MPI_FLOAT,
                              comm->a2a, r);
      },
      [=] { copyToSelf(in, out, n); });
}

moe_rt_status reduceScatter(moe_rt_stream stream, moe_rt_comm comm,
                            const float *in, float *out, int64_t n) {
  // FSMoE's reduce-scatter belongs to the MoE layer's pipeline, like the
  // all-to-alls: high priority, same communicator class.
  return enqueueCollective(stream, comm, comm->a2a, ReduceScatter, n * 4,
                           false, [=](MPI_Request *r) {
                             return MPI_Ireduce_scatter_block(
                                 in, out, int(n), MPI_FLOAT, MPI_SUM,
                                 comm->a2a, r);
                           },
                           [=] { copyToSelf(in, out, n); });
}

moe_rt_status allGatherCounts(moe_rt_stream stream, moe_rt_comm comm,
                              const int64_t *in, int64_t *out, int64_t n) {
  return enqueueCollective(
      stream, comm, comm->a2a, AllGather, n * 8, false, [=](MPI_Request *r) {
        return MPI_Iallgather(in, int(n), MPI_INT64_T, out, int(n),
                              MPI_INT64_T, comm->a2a, r);
      },
      [=] { copyToSelf(in, out, n); });
}

moe_rt_status allToAllPlanned(moe_rt_stream stream, moe_rt_comm comm,
                              std::shared_ptr<const PeerPlan> plan,
                              const float *in, float *out) {
  // Shape checks compare the kind only: the sizes differ by rank by design.
  // The int arrays live as long as the collective (the post closure): a
  // non-blocking MPI collective may read them until it completes.
  auto ints = std::make_shared<std::vector<std::vector<int>>>();
  return enqueueCollective(
      stream, comm, comm->a2a, AllToAllV, -1, false, [=](MPI_Request *r) {
        if (!fitsInt(*plan))
          return int(MPI_ERR_COUNT);
        for (const std::vector<int64_t> *v :
             {&plan->sendCount, &plan->sendOffset, &plan->recvCount,
              &plan->recvOffset})
          ints->emplace_back(v->begin(), v->end());
        std::vector<std::vector<int>> &a = *ints;
        return MPI_Ialltoallv(in, a[0].data(), a[1].data(), MPI_FLOAT, out,
                              a[2].data(), a[3].data(), MPI_FLOAT, comm->a2a,
                              r);
      },
      [=] { copySelf(*plan, in, out); });
}

namespace {
/// A VPlan's counts as MPI ints, or false when one does not fit.
bool toInts(const VPlan &plan, std::vector<int> &count,
            std::vector<int> &offset) {
  for (const std::vector<int64_t> *v : {&plan.count, &plan.offset})
    for (int64_t x : *v)
      if (x < 0 || x > std::numeric_limits<int>::max())
        return false;
  count.assign(plan.count.begin(), plan.count.end());
  offset.assign(plan.offset.begin(), plan.offset.end());
  return true;
}
} // namespace

moe_rt_status allGatherVPlanned(moe_rt_stream stream, moe_rt_comm comm,
                                std::shared_ptr<const VPlan> plan,
                                const float *in, float *out) {
  // The int arrays live as long as the post closure (a non-blocking MPI
  // collective may read them until it completes); sizes differ by rank.
  auto ints = std::make_shared<std::pair<std::vector<int>, std::vector<int>>>();
  return enqueueCollective(
      stream, comm, comm->a2a, AllGather, -1, false,
      [=](MPI_Request *r) {
        if (!toInts(*plan, ints->first, ints->second))
          return int(MPI_ERR_COUNT);
        int me = comm->rank;
        return MPI_Iallgatherv(in, ints->first[me], MPI_FLOAT, out,
                               ints->first.data(), ints->second.data(),
                               MPI_FLOAT, comm->a2a, r);
      },
      [=] { copyToSelf(in, out + plan->offset[0], plan->count[0]); });
}

moe_rt_status reduceScatterVPlanned(moe_rt_stream stream, moe_rt_comm comm,
                                    std::shared_ptr<const VPlan> plan,
                                    const float *in, float *out) {
  auto ints = std::make_shared<std::pair<std::vector<int>, std::vector<int>>>();
  return enqueueCollective(
      stream, comm, comm->a2a, ReduceScatter, -1, false,
      [=](MPI_Request *r) {
        if (!toInts(*plan, ints->first, ints->second))
          return int(MPI_ERR_COUNT);
        // Rank g's part starts at offset[g]: the offsets are the prefix sums
        // of the counts, as MPI_Reduce_scatter's layout is.
        return MPI_Ireduce_scatter(in, out, ints->first.data(), MPI_FLOAT,
                                   MPI_SUM, comm->a2a, r);
      },
      [=] { copyToSelf(in + plan->offset[0], out, plan->count[0]); });
}

} // namespace moe_rt::mpi
