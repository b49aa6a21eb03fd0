//===- CommCpuShare.cpp - how communication and compute share a core ------===//

#include "CommCpuShare.h"

#include "moe_rt/collectives.h"
#include "moe_rt/moe_rt.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace moe_profile {
namespace {

using Clock = std::chrono::steady_clock;

/// One phase's length: long against a GEMM (~0.1 ms) and a scheduler tick.
constexpr auto kPhase = std::chrono::milliseconds(60);

/// The compute stream's stand-in: 128^3 SGEMMs back to back, counted.
class GemmLoop {
public:
  GemmLoop() : a(kSide * kSide, 1.0f), b(a), c(a.size()) {
    thread = std::thread([this] {
      while (!stop.load(std::memory_order_relaxed)) {
        if (paused.load(std::memory_order_relaxed)) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          continue;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kSide, kSide,
                    kSide, 1.0f, a.data(), kSide, b.data(), kSide, 0.0f,
                    c.data(), kSide);
        done.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  ~GemmLoop() {
    stop = true;
    thread.join();
  }
  long count() const { return done.load(std::memory_order_relaxed); }
  /// A paused loop sleeps: the core is the collectives' alone.
  void pause(bool p) { paused.store(p, std::memory_order_relaxed); }

private:
  static constexpr int kSide = 128;
  std::vector<float> a, b, c;
  std::atomic<bool> stop{false}, paused{false};
  std::atomic<long> done{0};
  std::thread thread;
};

/// GEMMs per second while `phase` runs on this thread.
template <typename Phase>
double rateDuring(const GemmLoop &gemms, Phase phase) {
  long before = gemms.count();
  auto t0 = Clock::now();
  phase();
  std::chrono::duration<double> took = Clock::now() - t0;
  return (gemms.count() - before) / took.count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The runtime's own all-to-all (or all-reduce) on its own communication
/// pool (the poll policy and MPI progress a step has), `count` floats per
/// rank.
class RuntimeAllToAll {
public:
  RuntimeAllToAll(long count, bool allReduce = false) : allReduce(allReduce) {
    ok = moe_rt_comm_create_world(60.0, 0, &comm) == MOE_RT_OK &&
         moe_rt_stream_create_pool(&pool) == MOE_RT_OK;
    int64_t shape[1] = {count};
    ok = ok &&
         moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 1, shape, &send) ==
             MOE_RT_OK &&
         moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, 1, shape, &recv) ==
             MOE_RT_OK;
    bytes = count * 4;
  }
  ~RuntimeAllToAll() {
    if (send.data)
      moe_rt_tensor_destroy(&send);
    if (recv.data)
      moe_rt_tensor_destroy(&recv);
    if (pool)
      moe_rt_stream_destroy(pool);
    if (comm)
      moe_rt_comm_destroy(comm);
  }
  /// `n` collectives queued at once, waited for as the host thread waits.
  bool run(int n) {
    for (int i = 0; i < n && ok; ++i)
      ok = (allReduce ? moe_rt_all_reduce(pool, comm, &send, 0, bytes)
                      : moe_rt_all_to_all(pool, comm, &send, &recv)) ==
           MOE_RT_OK;
    return ok && moe_rt_stream_synchronize(pool, 60.0) == MOE_RT_OK;
  }
  bool ok = false;

private:
  bool allReduce;
  int64_t bytes = 0;
  moe_rt_comm comm = nullptr;
  moe_rt_stream pool = nullptr;
  moe_rt_tensor send{}, recv{};
};

} // namespace

std::string measureSmallCollective(int repeats, double &us) {
  int size;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // One float to every rank: nothing but the runtime's and the links'
  // fixed costs.
  RuntimeAllToAll a2a(size);
  std::vector<double> times;
  for (int i = 0; i < repeats + 3; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = Clock::now();
    if (!a2a.run(1))
      return moe_rt_last_error();
    if (i >= 3) // the first calls open connections
      times.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - t0)
              .count());
  }
  double mine = median(times), sum;
  MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  us = sum / size;
  return "";
}

std::string measureRuntimeCollective(bool allReduce, long bytes, int repeats,
                                     double &us) {
  int size;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  RuntimeAllToAll coll(std::max<long>(size, bytes / 4 / size * size),
                       allReduce);
  std::vector<double> times;
  for (int i = 0; i < repeats + 2; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = Clock::now();
    if (!coll.run(1))
      return moe_rt_last_error();
    double mine =
        std::chrono::duration<double, std::micro>(Clock::now() - t0).count(),
           slowest;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i >= 2) // the first calls open connections
      times.push_back(slowest);
  }
  us = median(times);
  return "";
}

std::string measureCommCpuShare(long bytes, int rounds, CommCpuShare &out) {
  int size;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  RuntimeAllToAll a2a(std::max<long>(size, bytes / 4 / size * size));
  // How many all-to-alls fill a phase, timed without the compute thread;
  // rank 0 decides, so that every rank runs as many.
  MPI_Barrier(MPI_COMM_WORLD);
  auto t0 = Clock::now();
  if (!a2a.run(3))
    return moe_rt_last_error();
  double one = std::chrono::duration<double>(Clock::now() - t0).count() / 3;
  int perPhase = std::max(
      1, static_cast<int>(std::chrono::duration<double>(kPhase).count() /
                          std::max(one, 1e-6)));
  MPI_Bcast(&perPhase, 1, MPI_INT, 0, MPI_COMM_WORLD);

  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<double> shares, alone, beside, stretches, commAlone, commBeside,
      partial, commPartial;
  {
    GemmLoop gemms;
    for (int r = 0; r < rounds; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      double idle =
          rateDuring(gemms, [] { std::this_thread::sleep_for(kPhase); });
      MPI_Barrier(MPI_COMM_WORLD);
      bool ran = true;
      auto c0 = Clock::now();
      double busy = rateDuring(gemms, [&] { ran = a2a.run(perPhase); });
      double commBusy =
          std::chrono::duration<double>(Clock::now() - c0).count();
      if (!ran)
        return moe_rt_last_error();
      // The same all-to-alls with the compute thread asleep: what the
      // GEMMs cost the collectives (the converse of the share).
      gemms.pause(true);
      MPI_Barrier(MPI_COMM_WORLD);
      c0 = Clock::now();
      ran = a2a.run(perPhase);
      double commIdle =
          std::chrono::duration<double>(Clock::now() - c0).count();
      // Only the odd ranks compute: each collective has ranks computing
      // and ranks idle (every rank waits for the others' pool threads).
      gemms.pause(rank % 2 == 0);
      MPI_Barrier(MPI_COMM_WORLD);
      c0 = Clock::now();
      ran = ran && a2a.run(perPhase);
      double commSome =
          std::chrono::duration<double>(Clock::now() - c0).count();
      gemms.pause(false);
      if (!ran)
        return moe_rt_last_error();
      partial.push_back(commIdle > 0 ? commSome / commIdle : 1);
      commPartial.push_back(commSome);
      alone.push_back(idle);
      beside.push_back(busy);
      shares.push_back(idle > 0 ? 1 - busy / idle : 0);
      commAlone.push_back(commIdle);
      commBeside.push_back(commBusy);
      stretches.push_back(commIdle > 0 ? commBusy / commIdle : 1);
    }
  }
  double mine[8] = {median(shares),     median(alone),
                    median(beside),     median(stretches),
                    median(commAlone),  median(commBeside),
                    median(partial),    median(commPartial)},
         sum[8];
  MPI_Allreduce(mine, sum, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  out.share = std::clamp(sum[0] / size, 0.0, 0.9);
  out.gemmsPerSecondAlone = sum[1] / size;
  out.gemmsPerSecondBesideComm = sum[2] / size;
  out.stretch = std::clamp(sum[3] / size, 1.0, 100.0);
  out.commSecondsAlone = sum[4] / size / perPhase;
  out.commSecondsBesideCompute = sum[5] / size / perPhase;
  // One rank has no peer: nothing partial to measure.
  out.stretchPartial =
      size > 1 ? std::clamp(sum[6] / size, 1.0, 100.0) : out.stretch;
  out.commSecondsBesidePartial = sum[7] / size / perPhase;
  return "";
}

} // namespace moe_profile
