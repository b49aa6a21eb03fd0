//===- AllReduceGroups.cpp - all-reduces coalesced into one ---------------===//

#include "AllReduceGroups.h"

#include "../Backend.h"
#include "../CollectivePlan.h"
#include "../Error.h"
#include "../cpu/CpuOps.h"
#include "../cpu/CpuTasks.h"
#include "OnCuda.h"

#include <map>
#include <memory>
#include <mutex>
#include <vector>

using namespace moe_rt;
using coll::ElementRange;
using coll::elementRange;

namespace {

/// One deferred moe_rt_all_reduce_into: out = src, then out's range summed.
/// The tensor descriptors are copied: a caller may pass views that live
/// only for the call (the interpreter's do); the data they point to lives
/// through the step.
struct Member {
  moe_rt_comm comm;
  moe_rt_tensor src, out;
  int64_t offsetBytes, sizeBytes;
};

std::mutex groupsMutex;
/// The open group of each stream (a stream is driven by one host thread,
/// but several streams' threads may issue at once).
std::map<moe_rt_stream, std::vector<Member>> openGroups;

/// The members' ranges, contiguous in a scratch buffer: packed after the
/// copies, reduced once, unpacked into each result.
moe_rt_status runPacked(moe_rt_stream s, std::vector<Member> members) {
  auto ranges = std::make_shared<std::vector<ElementRange>>();
  int64_t total = 0;
  for (const Member &m : members) {
    ElementRange r;
    std::string why = elementRange(m.offsetBytes, m.sizeBytes,
                                   moe_rt_tensor_numel(&m.out) * 4, 4, r);
    if (!why.empty())
      return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_all_reduce_into: " + why);
    ranges->push_back(r);
    total += r.count;
  }
  auto scratch = std::make_shared<std::vector<float>>(total);
  auto outs = std::make_shared<std::vector<float *>>();
  for (Member &m : members) {
    outs->push_back(static_cast<float *>(m.out.data));
    // The copy joins the all-reduce in the pool's low-priority queue, as
    // a lone moe_rt_all_reduce_into's does.
    if (moe_rt_status st = cpu::copy(s, &m.src, 0, &m.out, 0,
                                     moe_rt_tensor_numel(&m.src),
                                     /*lowPriority=*/true))
      return st;
  }
  auto each = [ranges, outs](auto &&move) {
    int64_t at = 0;
    for (size_t i = 0; i < ranges->size(); ++i) {
      move((*outs)[i] + (*ranges)[i].offset, at, (*ranges)[i].count);
      at += (*ranges)[i].count;
    }
  };
  float *packed = scratch->data();
  // Each task holds the scratch buffer: a later enqueue that fails must
  // not free it under a queued task.
  if (moe_rt_status st = cpu::enqueue(
          s,
          [each, scratch, packed](std::string &) {
            each([&](float *from, int64_t at, int64_t n) {
              std::copy(from, from + n, packed + at);
            });
            return MOE_RT_OK;
          },
          /*low=*/true))
    return st;
  moe_rt_tensor view{}; // read when queued: the data pointer and size
  view.data = packed;
  view.rank = 1;
  view.shape[0] = total;
  view.dtype = MOE_RT_F32;
  view.backend = MOE_RT_CPU;
  if (moe_rt_status st = moe_rt_all_reduce(s, members[0].comm, &view, 0, -1))
    return st;
  return cpu::enqueue(
      s,
      [each, scratch](std::string &) {
        each([&](float *to, int64_t at, int64_t n) {
          std::copy(scratch->data() + at, scratch->data() + at + n, to);
        });
        return MOE_RT_OK;
      },
      /*low=*/true);
}

} // namespace

bool moe_rt::deferToGroup(moe_rt_stream s, moe_rt_comm comm,
                          const moe_rt_tensor *src, moe_rt_tensor *out,
                          int64_t offsetBytes, int64_t sizeBytes) {
  std::lock_guard<std::mutex> lock(groupsMutex);
  auto it = openGroups.find(s);
  if (it == openGroups.end())
    return false;
  it->second.push_back({comm, *src, *out, offsetBytes, sizeBytes});
  return true;
}

extern "C" moe_rt_status moe_rt_all_reduce_group_begin(moe_rt_stream s) {
  if (!s)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_all_reduce_group_begin: NULL stream");
  if (backendOf(s) != MOE_RT_CPU)
    return ok(); // a CUDA stream issues each all-reduce as it comes
  std::lock_guard<std::mutex> lock(groupsMutex);
  if (!openGroups.emplace(s, std::vector<Member>()).second)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_all_reduce_group_begin: the stream's group is "
                "already open");
  return ok();
}

extern "C" moe_rt_status moe_rt_all_reduce_group_end(moe_rt_stream s) {
  if (!s)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_all_reduce_group_end: NULL stream");
  if (backendOf(s) != MOE_RT_CPU)
    return ok();
  std::vector<Member> members;
  {
    std::lock_guard<std::mutex> lock(groupsMutex);
    auto it = openGroups.find(s);
    if (it == openGroups.end())
      return fail(MOE_RT_INVALID_ARGUMENT,
                  "moe_rt_all_reduce_group_end: no group is open on the "
                  "stream");
    members = std::move(it->second);
    openGroups.erase(it);
  }
  if (members.empty())
    return ok();
  for (const Member &m : members)
    if (m.comm != members[0].comm)
      return fail(MOE_RT_INVALID_ARGUMENT,
                  "moe_rt_all_reduce_group_end: the group's all-reduces "
                  "run on different groups of ranks");
  return runPacked(s, std::move(members));
}
