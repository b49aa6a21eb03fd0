//===- DeviceVarRoutingTest.cpp - CUDA dropless ops, run on the host ------===//
//
// The CUDA backend's variable-count ops (src/device/VarRoutingOps.h) run
// whole — device phases, host plan, exchanges — for G simulated ranks, one
// thread each, on the HostExecutor and an in-memory link (SimLink: the
// all-gather and the all-to-all-v that NCCL does on a GPU). References:
// dispatch / combine and their vjps by brute force from the routing's
// definition (rank g's pairs in GShard order, every token's first choice
// before any second one, land in their expert's rows after those of
// ranks < g); the experts against the CPU op moe_rt_expert_v(_grad).
//
//===----------------------------------------------------------------------===//

#include "CheckedExecutor.h"
#include "TestTensor.h"

#include "../src/device/PlacementOps.h"
#include "../src/device/TokenChunkOps.h"
#include "../src/device/VarRoutingOps.h"
#include "../src/kernels/VarRouting.h"
#ifdef MOE_RT_HAVE_CUDA
#include "../src/cuda/CudaVarRoutingOps.h"
#endif

#include "moe_rt/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace dev = moe_rt::device;
using moe_rt::VarRouteShape;
using moe_rt_test::CheckedExecutor;
using moe_rt_test::Tensor;

//===--- an in-memory group of threads ------------------------------------===//

/// What the ranks of one simulated group share: a barrier and one posted
/// buffer per rank.
struct SimGroup {
  explicit SimGroup(int64_t G) : G(G), posted(G), postedRows(G) {}

  /// A rank left waiting is what NCCL would hang on: it ends the test
  /// binary with a message instead of hanging it.
  void barrier() {
    std::unique_lock<std::mutex> lock(mutex);
    int64_t gen = generation;
    if (++arrived == G) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else if (!cv.wait_for(lock, std::chrono::seconds(20),
                            [&] { return generation != gen; })) {
      std::fprintf(stderr, "SimGroup: a rank was left waiting in a "
                           "collective (the others never came)\n");
      std::abort();
    }
  }

  int64_t G;
  std::mutex mutex;
  std::condition_variable cv;
  int64_t arrived = 0, generation = 0;
  std::vector<const void *> posted;
  std::vector<std::vector<int64_t>> postedRows;
  int64_t exchanges = 0, hostReads = 0; // counted by rank 0's link
};

/// VarRoutingOps.h's link over a SimGroup; counts what rank 0 does.
class SimLink {
public:
  SimLink(SimGroup &g, int64_t rank) : g(g), rank(rank) {}

  moe_rt_status allGather(const int64_t *mine, int64_t *all, int64_t n) {
    return gather(mine, all, n);
  }
  moe_rt_status allGatherF32(const float *mine, float *all, int64_t n) {
    return gather(mine, all, n);
  }
  /// mine[i] = sum over ranks p, in rank order, of p's all[rank n + i].
  moe_rt_status reduceScatterF32(const float *all, float *mine, int64_t n) {
    g.posted[rank] = all;
    g.barrier();
    for (int64_t i = 0; i < n; ++i) {
      float sum = 0;
      for (int64_t p = 0; p < g.G; ++p)
        sum += static_cast<const float *>(g.posted[p])[rank * n + i];
      mine[i] = sum;
    }
    g.barrier();
    return MOE_RT_OK;
  }
  moe_rt_status toHost(void *dst, const void *src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    if (rank == 0)
      ++g.hostReads;
    return MOE_RT_OK;
  }
  moe_rt_status toDevice(void *dst, const void *src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return MOE_RT_OK;
  }
  /// Rank p's rows for this rank start after its rows for ranks < this one;
  /// what arrives must be what this rank expects (else NCCL would hang).
  moe_rt_status allToAllV(const float *send, int64_t sendCapacity,
                          const int64_t *sendRows, float *recv,
                          int64_t recvCapacity, const int64_t *recvRows,
                          int64_t m) {
    g.posted[rank] = send;
    g.postedRows[rank].assign(sendRows, sendRows + g.G);
    g.barrier();
    int64_t at = 0, sent = 0;
    for (int64_t p = 0; p < g.G; ++p)
      sent += sendRows[p];
    EXPECT_LE(sent, sendCapacity);
    for (int64_t p = 0; p < g.G; ++p) {
      const std::vector<int64_t> &theirs = g.postedRows[p];
      int64_t from = 0;
      for (int64_t q = 0; q < rank; ++q)
        from += theirs[q];
      EXPECT_EQ(theirs[rank], recvRows[p]) << "rank " << p << " -> " << rank;
      EXPECT_LE(at + recvRows[p], recvCapacity);
      std::memcpy(recv + at * m,
                  static_cast<const float *>(g.posted[p]) + from * m,
                  sizeof(float) * recvRows[p] * m);
      at += recvRows[p];
    }
    g.barrier();
    if (rank == 0)
      ++g.exchanges;
    return MOE_RT_OK;
  }

private:
  /// Every rank's n values, in rank order.
  template <class T> moe_rt_status gather(const T *mine, T *all, int64_t n) {
    g.posted[rank] = mine;
    g.barrier();
    for (int64_t p = 0; p < g.G; ++p)
      std::memcpy(all + p * n, g.posted[p], sizeof(T) * n);
    g.barrier();
    return MOE_RT_OK;
  }

  SimGroup &g;
  int64_t rank;
};

/// Runs body(rank) on G threads; each gets its own executor.
void runRanks(int64_t G, const std::function<void(int64_t)> &body) {
  std::vector<std::thread> threads;
  for (int64_t g = 0; g < G; ++g)
    threads.emplace_back(body, g);
  for (std::thread &t : threads)
    t.join();
}

//===--- the routing by its definition ------------------------------------===//

std::vector<float> randomVec(int64_t n, unsigned seed, float scale = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(rng);
  return v;
}

/// Where (rank g, token t, choice j) lands: rank `to`, local expert l, row.
struct Slot {
  int64_t to, l, row;
};

/// G ranks' routing: indices (T x k, distinct experts per token, skewed
/// towards low experts so loads differ), data, and the brute-force slots.
struct Case {
  VarRouteShape r;
  std::vector<std::vector<int64_t>> idx;
  std::vector<std::vector<Slot>> slot;    // per rank, T x k
  std::vector<std::vector<int64_t>> rows; // per rank, E_l x G
  std::vector<int64_t> load;              // per expert

  Case(int64_t G, int64_t El, int64_t T, int64_t k, int64_t M, unsigned seed,
       int64_t R = -1) {
    r.T = T;
    r.k = k;
    r.G = G;
    r.El = El;
    r.E = G * El;
    r.M = M;
    r.block = 3;
    std::mt19937 rng(seed);
    for (int64_t g = 0; g < G; ++g) {
      std::vector<int64_t> v(T * k);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < k; ++j) {
          int64_t e;
          bool taken;
          do {
            double u = std::uniform_real_distribution<double>(0, 1)(rng);
            e = int64_t(u * u * double(r.E)); // skewed: low experts busier
            taken = false;
            for (int64_t q = 0; q < j; ++q)
              taken |= v[t * k + q] == e;
          } while (taken);
          v[t * k + j] = e;
        }
      idx.push_back(v);
    }
    // GShard order inside a rank: choice-major, then rank order.
    load.assign(r.E, 0);
    rows.assign(G, std::vector<int64_t>(El * G, 0));
    slot.assign(G, std::vector<Slot>(T * k));
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t t = 0; t < T; ++t) {
          int64_t e = idx[g][t * k + j];
          slot[g][t * k + j] = {e / El, e % El, load[e]++};
          ++rows[e / El][(e % El) * G + g];
        }
    int64_t most = 0;
    for (int64_t n : load)
      most = std::max(most, n);
    r.R = R < 0 ? most + 2 : R; // two spare rows: the tails must be zero
  }
  VarRouteShape on(int64_t rank) const {
    VarRouteShape s = r;
    s.rank = rank;
    return s;
  }

  /// Token chunk `part` of `parts`, by its definition (ops.h): of the c
  /// pairs rank g routes to expert e (GShard order), those at ranks
  /// [part c / parts, (part + 1) c / parts) travel, packed after the
  /// chunk's rows from ranks < g; the others get row -1.
  Case chunk(int64_t part, int64_t parts) const {
    Case c = *this;
    c.r.part = part;
    c.r.parts = parts;
    std::vector<int64_t> filled(r.E, 0);
    for (int64_t g = 0; g < r.G; ++g) {
      std::vector<int64_t> mine(r.E, 0); // pairs of rank g per expert
      for (int64_t i = 0; i < r.T * r.k; ++i)
        ++mine[idx[g][i]];
      std::vector<int64_t> seen(r.E, 0);
      for (int64_t j = 0; j < r.k; ++j)
        for (int64_t t = 0; t < r.T; ++t) {
          int64_t e = idx[g][t * r.k + j], at = seen[e]++;
          int64_t lo = part * mine[e] / parts, hi = (part + 1) * mine[e] / parts;
          c.slot[g][t * r.k + j].row =
              at >= lo && at < hi ? filled[e] + at - lo : -1;
        }
      for (int64_t e = 0; e < r.E; ++e) {
        int64_t n = (part + 1) * mine[e] / parts - part * mine[e] / parts;
        c.rows[e / r.El][(e % r.El) * r.G + g] = n;
        filled[e] += n;
      }
    }
    return c;
  }

  /// The same routing given as logical experts under the expert placement
  /// `table` (G x E_l, slot g E_l + s holds logical expert table[...]):
  /// each choice of physical expert p becomes logical expert table[p], so
  /// the op must route it back to p and the references above still hold.
  Case placed(const std::vector<int64_t> &table) const {
    Case c = *this;
    for (std::vector<int64_t> &v : c.idx)
      for (int64_t &e : v)
        e = table[e];
    return c;
  }
  int64_t expertSide() const { return r.El * r.R * r.M; }
};

void expectSame(const std::vector<float> &got, const std::vector<float> &want,
                const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", expected "
                    << want[i];
      return;
    }
}

double maxAbs(const std::vector<float> &v) {
  double m = 0;
  for (float x : v)
    m = std::max(m, std::fabs(double(x)));
  return m;
}

struct Shape {
  int64_t G, El, T, k;
};

std::vector<Shape> shapes() {
  return {{1, 4, 7, 2}, {2, 1, 6, 1}, {2, 3, 9, 2}, {4, 2, 5, 2}, {4, 1, 8, 3}};
}

std::string name(const Shape &s) {
  return "G=" + std::to_string(s.G) + " El=" + std::to_string(s.El) +
         " T=" + std::to_string(s.T) + " k=" + std::to_string(s.k);
}

//===--- dispatch and combine ---------------------------------------------===//

/// Runs dispatch_v and its vjp for every rank of `c` (token chunk and
/// expert placement as c.r says) and checks them against c's slots: each
/// routed row of the chunk lands where the definition puts it, the tails
/// are zero, dx sums the chunk's rows. `placed`: c.r.slots is set.
void checkDispatch(const Case &c, bool placed) {
  const VarRouteShape &r = c.r;
  const int64_t M = r.M;
  std::vector<std::vector<float>> x(r.G), dout(r.G), out(r.G), dx(r.G);
  std::vector<std::vector<int64_t>> rows(r.G);
  for (int64_t g = 0; g < r.G; ++g) {
    x[g] = randomVec(r.T * M, 10 + unsigned(g));
    dout[g] = randomVec(c.expertSide(), 20 + unsigned(g));
    out[g].assign(c.expertSide(), 7.0f); // stale values must go
    dx[g].assign(r.T * M, 7.0f);
    rows[g].assign(r.El * r.G, -9);
  }
  SimGroup group(r.G);
  runRanks(r.G, [&](int64_t g) {
    CheckedExecutor ex;
    SimLink link(group, g);
    EXPECT_EQ(dev::dispatchV(ex, link, c.on(g), x[g].data(), c.idx[g].data(),
                             out[g].data(), rows[g].data()),
              MOE_RT_OK)
        << moe_rt_last_error();
    CheckedExecutor bx;
    EXPECT_EQ(dev::dispatchVGrad(bx, link, c.on(g), c.idx[g].data(),
                                 dout[g].data(), dx[g].data()),
              MOE_RT_OK)
        << moe_rt_last_error();
  });
  // The gathered counts (and the placement's table) read on the host; one
  // exchange per op.
  EXPECT_EQ(group.hostReads, 2 * (1 + placed));
  EXPECT_EQ(group.exchanges, 2);
  std::vector<std::vector<float>> want(r.G,
                                       std::vector<float>(c.expertSide()));
  std::vector<std::vector<float>> wantDx(r.G, std::vector<float>(r.T * M, 0));
  for (int64_t g = 0; g < r.G; ++g)
    for (int64_t t = 0; t < r.T; ++t)
      for (int64_t j = 0; j < r.k; ++j) {
        Slot s = c.slot[g][t * r.k + j];
        if (s.row < 0)
          continue; // another token chunk's row
        int64_t at = (s.l * r.R + s.row) * M;
        for (int64_t col = 0; col < M; ++col) {
          want[s.to][at + col] = x[g][t * M + col];
          wantDx[g][t * M + col] += dout[s.to][at + col];
        }
      }
  for (int64_t g = 0; g < r.G; ++g) {
    EXPECT_EQ(rows[g], c.rows[g]) << "rows of rank " << g;
    expectSame(out[g], want[g], "dispatch out of rank " + std::to_string(g));
    expectSame(dx[g], wantDx[g], "dispatch dx of rank " + std::to_string(g));
  }
}

/// combine_v and its vjp for every rank of `c`, against c's slots (rows of
/// another chunk add nothing and get a zero weight gradient).
void checkCombine(const Case &c, bool placed) {
  const VarRouteShape &r = c.r;
  const int64_t M = r.M;
  std::vector<std::vector<float>> eo(r.G), w(r.G), dy(r.G), out(r.G), deo(r.G),
      dw(r.G);
  for (int64_t g = 0; g < r.G; ++g) {
    eo[g] = randomVec(c.expertSide(), 40 + unsigned(g));
    w[g] = randomVec(r.T * r.k, 50 + unsigned(g));
    dy[g] = randomVec(r.T * M, 60 + unsigned(g));
    out[g].assign(r.T * M, 7.0f);
    deo[g].assign(c.expertSide(), 7.0f);
    dw[g].assign(r.T * r.k, 7.0f);
  }
  SimGroup group(r.G);
  runRanks(r.G, [&](int64_t g) {
    CheckedExecutor ex;
    SimLink link(group, g);
    EXPECT_EQ(dev::combineV(ex, link, c.on(g), c.rows[g].data(), eo[g].data(),
                            c.idx[g].data(), w[g].data(), out[g].data()),
              MOE_RT_OK)
        << moe_rt_last_error();
    CheckedExecutor bx;
    EXPECT_EQ(dev::combineVGrad(bx, link, c.on(g), c.rows[g].data(),
                                eo[g].data(), c.idx[g].data(), w[g].data(),
                                dy[g].data(), deo[g].data(), dw[g].data()),
              MOE_RT_OK)
        << moe_rt_last_error();
  });
  // One each: the vjp moves its gradient rows and the outputs both ways
  // in one exchange.
  EXPECT_EQ(group.exchanges, 2);
  // Per op: the counts, the rows (and the placement's table).
  EXPECT_EQ(group.hostReads, 2 * (2 + placed));
  std::vector<std::vector<float>> want(r.G, std::vector<float>(r.T * M, 0)),
      wantDeo(r.G, std::vector<float>(c.expertSide(), 0)),
      wantDw(r.G, std::vector<float>(r.T * r.k, 0));
  for (int64_t g = 0; g < r.G; ++g)
    for (int64_t t = 0; t < r.T; ++t)
      for (int64_t j = 0; j < r.k; ++j) {
        Slot s = c.slot[g][t * r.k + j];
        if (s.row < 0)
          continue;
        const float *e = eo[s.to].data() + (s.l * r.R + s.row) * M;
        float wt = w[g][t * r.k + j];
        double d = 0;
        for (int64_t col = 0; col < M; ++col) {
          want[g][t * M + col] += wt * e[col];
          wantDeo[s.to][(s.l * r.R + s.row) * M + col] =
              wt * dy[g][t * M + col];
          float prod = dy[g][t * M + col] * e[col];
          d += prod;
        }
        wantDw[g][t * r.k + j] = float(d);
      }
  for (int64_t g = 0; g < r.G; ++g) {
    expectSame(out[g], want[g], "combine out of rank " + std::to_string(g));
    expectSame(deo[g], wantDeo[g],
               "combine dexpert_out of rank " + std::to_string(g));
    expectSame(dw[g], wantDw[g],
               "combine dweights of rank " + std::to_string(g));
  }
}

TEST(DeviceVarRouting, DispatchAndItsGradMoveExactlyTheRoutedRows) {
  for (Shape sh : shapes()) {
    SCOPED_TRACE(name(sh));
    checkDispatch(Case(sh.G, sh.El, sh.T, sh.k, 3, unsigned(sh.G * 31 + sh.El)),
                  false);
  }
}

TEST(DeviceVarRouting, CombineAndItsGradMatchTheRoutingsDefinition) {
  for (Shape sh : shapes()) {
    SCOPED_TRACE(name(sh));
    checkCombine(Case(sh.G, sh.El, sh.T, sh.k, 4, unsigned(sh.G * 17 + sh.T)),
                 false);
  }
}

//===--- token chunks and expert placements -------------------------------===//

/// Chunk counts that split unevenly (3, 5), leave some chunk of a small
/// count empty (parts > count) and, with the skewed routing, hit experts
/// that nobody picks.
std::vector<int64_t> partsToTry() { return {2, 3, 5}; }

TEST(DeviceVarRouting, TokenChunksMoveTheirRunOfEveryExpertsRows) {
  // The shapes above and one with more experts than choices (experts that
  // nobody picks, chunks of a count of 1 left empty).
  std::vector<Shape> all = shapes();
  all.push_back({2, 4, 2, 1});
  int64_t withEmptyExpert = 0;
  for (Shape sh : all)
    for (int64_t parts : partsToTry()) {
      Case whole(sh.G, sh.El, sh.T, sh.k, 3, unsigned(sh.G * 13 + sh.T + parts));
      bool emptyExpert = false;
      for (int64_t n : whole.load)
        emptyExpert |= n == 0;
      withEmptyExpert += emptyExpert;
      for (int64_t part = 0; part < parts; ++part) {
        SCOPED_TRACE(name(sh) + " chunk " + std::to_string(part) + " of " +
                     std::to_string(parts) +
                     (emptyExpert ? " (an expert empty)" : ""));
        Case c = whole.chunk(part, parts);
        checkDispatch(c, false);
        checkCombine(c, false);
      }
    }
  EXPECT_GT(withEmptyExpert, 0) << "no case had an expert nobody picks";
}

TEST(DeviceVarRouting, TheChunksOfAPartitionMoveEveryRowOnce) {
  // The definition the chunk references follow, checked on its own: every
  // routed (rank, pair) lands in exactly one chunk, and the chunks' rows
  // add up to the whole dispatch's.
  for (Shape sh : shapes())
    for (int64_t parts : partsToTry()) {
      SCOPED_TRACE(name(sh) + " parts " + std::to_string(parts));
      Case whole(sh.G, sh.El, sh.T, sh.k, 2, unsigned(sh.El * 7 + parts));
      std::vector<std::vector<int64_t>> times(
          whole.r.G, std::vector<int64_t>(whole.r.T * whole.r.k, 0));
      std::vector<std::vector<int64_t>> rows(
          whole.r.G, std::vector<int64_t>(whole.r.El * whole.r.G, 0));
      for (int64_t part = 0; part < parts; ++part) {
        Case c = whole.chunk(part, parts);
        for (int64_t g = 0; g < whole.r.G; ++g) {
          for (size_t i = 0; i < times[g].size(); ++i)
            times[g][i] += c.slot[g][i].row >= 0;
          for (size_t i = 0; i < rows[g].size(); ++i)
            rows[g][i] += c.rows[g][i];
        }
      }
      for (int64_t g = 0; g < whole.r.G; ++g) {
        EXPECT_EQ(times[g], std::vector<int64_t>(times[g].size(), 1));
        EXPECT_EQ(rows[g], whole.rows[g]);
      }
    }
}

/// A placement that is no rank's own order: expert e in slot
/// (e * 5 + 3) mod E when that is a permutation, else reversed.
std::vector<int64_t> scrambled(int64_t E) {
  std::vector<int64_t> table(E);
  for (int64_t p = 0; p < E; ++p)
    table[p] = E - 1 - p;
  if (E % 5 != 0)
    for (int64_t p = 0; p < E; ++p)
      table[(p * 5 + 3) % E] = p;
  return table;
}

TEST(DeviceVarRouting, AnExpertPlacementRoutesEachChoiceToItsSlot) {
  for (Shape sh : shapes())
    for (int64_t parts : {int64_t(1), int64_t(3)}) {
      SCOPED_TRACE(name(sh) + " parts " + std::to_string(parts));
      Case whole(sh.G, sh.El, sh.T, sh.k, 3, unsigned(sh.G * 3 + sh.k + parts));
      std::vector<int64_t> table = scrambled(whole.r.E);
      for (int64_t part = 0; part < parts; ++part) {
        Case c = whole.chunk(part, parts).placed(table);
        c.r.slots = table.data();
        checkDispatch(c, true);
        checkCombine(c, true);
      }
    }
}

TEST(DeviceVarRouting, ABadPlacementFailsEveryRankByTheCpuOpsWords) {
  Case c(2, 2, 4, 2, 3, 21);
  std::vector<int64_t> table = {0, 1, 2, 1}; // expert 1 twice, 3 nowhere
  c.r.slots = table.data();
  std::vector<std::string> messages(2);
  SimGroup group(2);
  runRanks(2, [&](int64_t g) {
    std::vector<float> x = randomVec(c.r.T * c.r.M, 3), out(c.expertSide());
    std::vector<int64_t> rows(c.r.El * c.r.G);
    CheckedExecutor ex;
    SimLink link(group, g);
    EXPECT_EQ(dev::dispatchV(ex, link, c.on(g), x.data(), c.idx[g].data(),
                             out.data(), rows.data()),
              MOE_RT_INVALID_ARGUMENT);
    messages[g] = moe_rt_last_error();
  });
  EXPECT_EQ(group.exchanges, 0);
  std::vector<int64_t> phys;
  std::string why = moe_rt::varplan::physicalExperts(c.r, phys);
  ASSERT_FALSE(why.empty());
  for (const std::string &m : messages)
    EXPECT_EQ(m, "moe_rt_dispatch_v: " + why);
  EXPECT_EQ(why, "block 3: expert placement: expert 1 is in two slots (rank 0 "
                 "slot 1 and rank 1 slot 1); the table must be a permutation "
                 "of the experts");
}

TEST(DeviceVarRouting, ALoadOverTheBoundFailsEveryRankAlikeAndMovesNothing) {
  Case c(4, 2, 8, 2, 3, 99, /*R=*/0);
  // The busiest expert's load, one row over the bound.
  int64_t busiest = 0;
  for (int64_t e = 0; e < c.r.E; ++e)
    if (c.load[e] > c.load[busiest])
      busiest = e;
  c.r.R = c.load[busiest] - 1;
  ASSERT_GT(c.r.R, 0);
  std::vector<std::string> messages(c.r.G);
  std::vector<moe_rt_status> status(c.r.G);
  std::vector<std::vector<int64_t>> rows(
      c.r.G, std::vector<int64_t>(c.r.El * c.r.G, 5));
  SimGroup group(c.r.G);
  runRanks(c.r.G, [&](int64_t g) {
    std::vector<float> x = randomVec(c.r.T * c.r.M, 7), out(c.expertSide());
    CheckedExecutor ex;
    SimLink link(group, g);
    status[g] = dev::dispatchV(ex, link, c.on(g), x.data(), c.idx[g].data(),
                               out.data(), rows[g].data());
    messages[g] = moe_rt_last_error();
  });
  EXPECT_EQ(group.exchanges, 0);
  int64_t first = -1; // the first expert over the bound, in expert order
  for (int64_t e = 0; e < c.r.E && first < 0; ++e)
    if (c.load[e] > c.r.R)
      first = e;
  std::string expected = "expert " + std::to_string(first) + " (local expert " +
                         std::to_string(first % c.r.El) + " of rank " +
                         std::to_string(first / c.r.El) + ") receives " +
                         std::to_string(c.load[first]) + " rows, bound " +
                         std::to_string(c.r.R);
  for (int64_t g = 0; g < c.r.G; ++g) {
    EXPECT_EQ(status[g], MOE_RT_INVALID_ARGUMENT);
    EXPECT_EQ(messages[g], messages[0]);
    EXPECT_NE(messages[g].find("moe_rt_dispatch_v: block 3: routing load "
                               "over the dispatch bound"),
              std::string::npos)
        << messages[g];
    EXPECT_NE(messages[g].find(expected), std::string::npos) << messages[g];
    EXPECT_EQ(rows[g], std::vector<int64_t>(c.r.El * c.r.G, 0));
  }
}

TEST(DeviceVarRouting, ABadIndexFailsItsRankAfterTheExchanges) {
  Case c(2, 2, 4, 2, 3, 5);
  c.idx[1][3] = c.r.E; // rank 1 names an expert that does not exist
  std::vector<moe_rt_status> status(2);
  std::vector<std::string> messages(2);
  SimGroup group(2);
  runRanks(2, [&](int64_t g) {
    std::vector<float> x = randomVec(c.r.T * c.r.M, 3), out(c.expertSide());
    std::vector<int64_t> rows(c.r.El * c.r.G);
    CheckedExecutor ex;
    SimLink link(group, g);
    status[g] = dev::dispatchV(ex, link, c.on(g), x.data(), c.idx[g].data(),
                               out.data(), rows.data());
    messages[g] = moe_rt_last_error();
  });
  // Both ranks took part in the exchange (neither left the other waiting).
  EXPECT_EQ(group.exchanges, 1);
  EXPECT_EQ(status[0], MOE_RT_OK);
  EXPECT_EQ(status[1], MOE_RT_BACKEND_ERROR);
  EXPECT_NE(messages[1].find("outside [0, E)"), std::string::npos)
      << messages[1];
}

/// A SimLink whose host read fails as a CUDA stream's does when a kernel
/// raised an error code (the host executor cannot defer one).
class FailingReadLink : public SimLink {
public:
  using SimLink::SimLink;
  moe_rt_status toHost(void *dst, const void *src, size_t bytes) {
    SimLink::toHost(dst, src, bytes);
    return moe_rt::fail(MOE_RT_BACKEND_ERROR, "a kernel raised an error");
  }
};

TEST(DeviceVarRouting, AStreamErrorAtTheHostReadIsReportedAfterTheExchanges) {
  Case c(2, 2, 4, 2, 3, 8);
  std::vector<moe_rt_status> status(2);
  std::vector<std::string> messages(2);
  std::vector<std::vector<float>> out(2, std::vector<float>(c.expertSide()));
  SimGroup group(2);
  runRanks(2, [&](int64_t g) {
    std::vector<float> x = randomVec(c.r.T * c.r.M, 3);
    std::vector<int64_t> rows(c.r.El * c.r.G);
    CheckedExecutor ex;
    SimLink plain(group, g);
    FailingReadLink failing(group, g);
    status[g] =
        g == 1 ? dev::dispatchV(ex, failing, c.on(g), x.data(), c.idx[g].data(),
                                out[g].data(), rows.data())
               : dev::dispatchV(ex, plain, c.on(g), x.data(), c.idx[g].data(),
                                out[g].data(), rows.data());
    messages[g] = moe_rt_last_error();
  });
  EXPECT_EQ(group.exchanges, 1); // rank 1 still took part
  EXPECT_EQ(status[0], MOE_RT_OK);
  EXPECT_GT(maxAbs(out[0]) + maxAbs(out[1]), 0);
  EXPECT_EQ(status[1], MOE_RT_BACKEND_ERROR);
  EXPECT_EQ(messages[1], "a kernel raised an error");
}

TEST(DeviceVarRouting, AChunksPackedRowsAreTheCpuKernels) {
  // The device bodies (packedRows, ChunkCut, KeepRows) against the CPU op's
  // kernels (kernels::packedRows, keepPart) on random routings.
  std::mt19937 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    int64_t G = 1 + rng() % 4, El = 1 + rng() % 4, T = rng() % 12,
            k = 1 + rng() % std::min<int64_t>(3, G * El),
            parts = 1 + rng() % 6, part = rng() % parts;
    SCOPED_TRACE("trial " + std::to_string(trial));
    Case c(G, El, T, k, 1, unsigned(100 + trial));
    VarRouteShape r = c.on(0);
    r.part = part;
    r.parts = parts;
    std::vector<int64_t> counts(r.E, -1), pos(T * k, -5), cpuCounts(r.E),
        cpuPos(T * k);
    CheckedExecutor ex;
    ASSERT_EQ(dev::packedRows(ex, r, c.idx[0].data(), counts.data(),
                              pos.data()),
              MOE_RT_OK);
    moe_rt::kernels::packedRows(T, r.E, k, c.idx[0].data(), cpuCounts.data(),
                                cpuPos.data());
    moe_rt::kernels::keepPart(T * k, r.E, c.idx[0].data(), part, parts,
                              cpuCounts.data(), cpuPos.data());
    EXPECT_EQ(counts, cpuCounts);
    EXPECT_EQ(pos, cpuPos);
  }
}

/// The rows_* link: host reads and writes, counted.
struct HostLink {
  int64_t reads = 0;
  moe_rt_status toHost(void *dst, const void *src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    ++reads;
    return MOE_RT_OK;
  }
  moe_rt_status toDevice(void *dst, const void *src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return MOE_RT_OK;
  }
};

/// A value that names its (expert, source rank, slot of the whole count,
/// column): a row in the wrong place cannot pass.
float tag(int64_t l, int64_t g, int64_t slot, int64_t col) {
  return float(l * 1000 + g * 100 + slot) + 0.25f * float(col);
}

/// moe.rows_window's three calls (rows_sum, rows_window per forward chunk,
/// rows_part) on a CPU stream and on the host executor, for forward chunks
/// of `total` (E_l x G) cut in fromParts, re-cut into chunk part of parts;
/// `corrupt` adds one to chunk 0's rows[l][g] entry `corrupt` (-1: none).
struct Window {
  int64_t El, G, M = 3, fromParts, part, parts, chunkCap = 1, outCap = 1;
  std::vector<int64_t> total;
  std::vector<std::vector<int64_t>> chunkRows;
  std::vector<std::vector<float>> chunk;

  Window(int64_t El, int64_t G, std::vector<int64_t> totalIn, int64_t fromParts,
         int64_t part, int64_t parts)
      : El(El), G(G), fromParts(fromParts), part(part), parts(parts),
        total(std::move(totalIn)) {
    namespace k = moe_rt::kernels;
    for (int64_t l = 0; l < El; ++l) {
      int64_t want = 0;
      for (int64_t g = 0; g < G; ++g)
        want += k::partRange(total[l * G + g], part, parts).size();
      outCap = std::max(outCap, want + 1);
      for (int64_t j = 0; j < fromParts; ++j) {
        int64_t have = 0;
        for (int64_t g = 0; g < G; ++g)
          have += k::partRange(total[l * G + g], j, fromParts).size();
        chunkCap = std::max(chunkCap, have + 1);
      }
    }
    for (int64_t j = 0; j < fromParts; ++j) {
      std::vector<int64_t> rows(El * G);
      std::vector<float> buf(El * chunkCap * M, -7.0f); // tails: junk
      for (int64_t l = 0; l < El; ++l) {
        int64_t at = 0;
        for (int64_t g = 0; g < G; ++g) {
          k::PartRange have = k::partRange(total[l * G + g], j, fromParts);
          rows[l * G + g] = have.size();
          for (int64_t slot = have.first; slot < have.end; ++slot, ++at)
            for (int64_t col = 0; col < M; ++col)
              buf[(l * chunkCap + at) * M + col] = tag(l, g, slot, col);
        }
      }
      chunkRows.push_back(rows);
      chunk.push_back(buf);
    }
  }

  moe_rt::RowsWindowShape shape(int64_t j) const {
    moe_rt::RowsWindowShape w;
    w.El = El;
    w.G = G;
    w.chunkRows = chunkCap;
    w.outRows = outCap;
    w.M = M;
    w.fromPart = j;
    w.fromParts = fromParts;
    w.part = part;
    w.parts = parts;
    return w;
  }

  /// The CPU op: out (E_l x outCap x M, from 0) and the rows, or the
  /// failing call's message.
  moe_rt_status onCpu(std::vector<float> &out, std::vector<int64_t> &rows,
                      std::string &message) const {
    moe_rt_stream s = nullptr;
    EXPECT_EQ(moe_rt_stream_create(MOE_RT_CPU, &s), MOE_RT_OK);
    Tensor tot({El, G}, MOE_RT_I64), y({El, outCap, M});
    moe_rt_status st = MOE_RT_OK;
    std::deque<Tensor> rowsT, chunkT; // Tensors do not move
    for (int64_t j = 0; j < fromParts; ++j) {
      rowsT.emplace_back(std::vector<int64_t>{El, G}, MOE_RT_I64);
      std::copy(chunkRows[j].begin(), chunkRows[j].end(), rowsT[j].i());
      chunkT.emplace_back(std::vector<int64_t>{El, chunkCap, M});
      std::copy(chunk[j].begin(), chunk[j].end(), chunkT[j].f());
    }
    for (int64_t j = 0; j < fromParts && !st; ++j)
      st = moe_rt_rows_sum(s, &rowsT[j], &tot, j > 0);
    for (int64_t j = 0; j < fromParts && !st; ++j)
      st = moe_rt_rows_window(s, j, fromParts, part, parts, &tot, &rowsT[j],
                              &chunkT[j], &y);
    if (!st)
      st = moe_rt_rows_part(s, part, parts, &tot);
    if (!st)
      st = moe_rt_stream_synchronize(s, 10.0);
    message = st ? moe_rt_last_error() : "";
    moe_rt_stream_destroy(s);
    out.assign(y.f(), y.f() + y.n());
    rows.assign(tot.i(), tot.i() + El * G);
    return st;
  }

  /// The CUDA bodies on the host executor.
  moe_rt_status onDevice(std::vector<float> &out, std::vector<int64_t> &rows,
                         std::string &message, int64_t &reads) const {
    out.assign(El * outCap * M, 0.0f);
    rows.assign(El * G, -3);
    CheckedExecutor ex;
    HostLink link;
    moe_rt_status st = MOE_RT_OK;
    for (int64_t j = 0; j < fromParts && !st; ++j)
      st = dev::rowsSum(ex, El * G, chunkRows[j].data(), rows.data(), j > 0);
    for (int64_t j = 0; j < fromParts && !st; ++j)
      st = dev::rowsWindow(ex, link, shape(j), rows.data(), chunkRows[j].data(),
                           chunk[j].data(), out.data());
    if (!st)
      st = dev::rowsPart(ex, El * G, part, parts, rows.data());
    message = st ? moe_rt_last_error() : "";
    reads = link.reads;
    return st;
  }
};

TEST(DeviceTokenChunks, RowsWindowIsTheCpuOpAndTheChunksDefinition) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    int64_t El = 1 + rng() % 3, G = 1 + rng() % 4, fromParts = 1 + rng() % 5,
            parts = 1 + rng() % 5, part = rng() % parts;
    std::vector<int64_t> total(El * G);
    for (int64_t &n : total)
      n = rng() % 3 == 0 ? 0 : rng() % 11; // empty blocks and uneven splits
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " +
                 std::to_string(fromParts) + " forward chunks -> chunk " +
                 std::to_string(part) + " of " + std::to_string(parts));
    Window w(El, G, total, fromParts, part, parts);
    std::vector<float> cpuOut, devOut;
    std::vector<int64_t> cpuRows, devRows;
    std::string cpuWhy, devWhy;
    int64_t reads = 0;
    ASSERT_EQ(w.onCpu(cpuOut, cpuRows, cpuWhy), MOE_RT_OK) << cpuWhy;
    ASSERT_EQ(w.onDevice(devOut, devRows, devWhy, reads), MOE_RT_OK) << devWhy;
    EXPECT_EQ(reads, 2 * fromParts); // the two tables per forward chunk
    EXPECT_EQ(devRows, cpuRows);
    expectSame(devOut, cpuOut, "rows_window out");
    // The definition: expert l's rows hold, source ranks in order, the
    // slots of chunk `part` of each whole count.
    for (int64_t l = 0; l < El; ++l) {
      int64_t at = 0;
      for (int64_t g = 0; g < G; ++g) {
        moe_rt::kernels::PartRange want =
            moe_rt::kernels::partRange(total[l * G + g], part, parts);
        EXPECT_EQ(devRows[l * G + g], want.size());
        for (int64_t slot = want.first; slot < want.end; ++slot, ++at)
          for (int64_t col = 0; col < w.M; ++col)
            ASSERT_EQ(devOut[(l * w.outCap + at) * w.M + col],
                      tag(l, g, slot, col))
                << "expert " << l << " rank " << g << " slot " << slot;
      }
    }
  }
}

TEST(DeviceTokenChunks, AWrongChunkTableFailsByTheCpuOpsWords) {
  Window w(2, 3, {4, 0, 7, 5, 2, 9}, 2, 1, 3);
  // Forward chunk 0's rows[1][1] one too many: the total becomes 3, whose
  // chunk 0 of 2 holds 1 row, not 2.
  w.chunkRows[0][4] += 1;
  std::vector<float> out;
  std::vector<int64_t> rows;
  std::string cpuWhy, devWhy;
  int64_t reads = 0;
  EXPECT_EQ(w.onCpu(out, rows, cpuWhy), MOE_RT_INVALID_ARGUMENT);
  EXPECT_EQ(w.onDevice(out, rows, devWhy, reads), MOE_RT_INVALID_ARGUMENT);
  // The CPU op fails its stream (the sync says so); the CUDA one fails
  // the call, at its host read of the tables.
  EXPECT_EQ("stream failed: " + devWhy, cpuWhy);
  EXPECT_EQ(devWhy, "moe_rt_rows_window: rows[1][1] = 2 of forward chunk 0 is "
                    "not that chunk of the total 3 (or does not fit its "
                    "buffer)");
}

//===--- NetMoE: the placing combine and the sample moves -----------------===//

/// A sample placement of G B samples, B per rank: a shuffle by `seed`
/// (seed 0: the identity).
std::vector<int64_t> placementOf(int64_t G, int64_t B, unsigned seed) {
  std::vector<int64_t> order(G * B);
  for (int64_t i = 0; i < G * B; ++i)
    order[i] = i;
  if (seed)
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  std::vector<int64_t> place(G * B);
  for (int64_t i = 0; i < G * B; ++i)
    place[order[i]] = i / B;
  return place;
}

/// Where sample s sits after the placement: (rank, local index).
std::pair<int64_t, int64_t> newHome(const std::vector<int64_t> &place,
                                    int64_t s) {
  int64_t n = 0;
  for (int64_t q = 0; q < s; ++q)
    n += place[q] == place[s];
  return {place[s], n};
}

/// The placing combine and its vjp for every rank of `c` (B samples of N
/// tokens per rank) against the definition (docs/netmoe-in-the-step.md):
/// sample s's combined rows (+ the residual's row for a first choice)
/// land on rank place[s] at its new local index.
void checkPlaced(const Case &c, int64_t B, const std::vector<int64_t> &place,
                 bool withResidual) {
  const VarRouteShape &r = c.r;
  const int64_t M = r.M, N = r.T / B;
  std::vector<std::vector<float>> eo(r.G), h(r.G), w(r.G), dy(r.G), out(r.G),
      deo(r.G), dh(r.G), dw(r.G);
  for (int64_t g = 0; g < r.G; ++g) {
    eo[g] = randomVec(c.expertSide(), 70 + unsigned(g));
    h[g] = randomVec(c.expertSide(), 75 + unsigned(g));
    w[g] = randomVec(r.T * r.k, 80 + unsigned(g));
    dy[g] = randomVec(r.T * M, 90 + unsigned(g));
    out[g].assign(r.T * M, 7.0f);
    deo[g].assign(c.expertSide(), 7.0f);
    dh[g].assign(c.expertSide(), 7.0f);
    dw[g].assign(r.T * r.k, 7.0f);
  }
  SimGroup group(r.G);
  runRanks(r.G, [&](int64_t g) {
    CheckedExecutor ex;
    SimLink link(group, g);
    EXPECT_EQ(dev::combineVPlaced(ex, link, c.on(g), B, eo[g].data(),
                                  c.idx[g].data(), w[g].data(),
                                  withResidual ? h[g].data() : nullptr,
                                  place.data(), out[g].data()),
              MOE_RT_OK)
        << moe_rt_last_error();
    CheckedExecutor bx;
    EXPECT_EQ(dev::combineVPlacedGrad(
                  bx, link, c.on(g), B, eo[g].data(), c.idx[g].data(),
                  w[g].data(), place.data(), dy[g].data(), deo[g].data(),
                  dw[g].data(), withResidual ? dh[g].data() : nullptr),
              MOE_RT_OK)
        << moe_rt_last_error();
  });
  EXPECT_EQ(group.exchanges, 2);
  std::vector<std::vector<float>> want(r.G, std::vector<float>(r.T * M, 0)),
      wantDeo(r.G, std::vector<float>(c.expertSide(), 0)),
      wantDh(r.G, std::vector<float>(c.expertSide(), 0)),
      wantDw(r.G, std::vector<float>(r.T * r.k, 0));
  for (int64_t g = 0; g < r.G; ++g)
    for (int64_t t = 0; t < r.T; ++t) {
      auto [dest, local] = newHome(place, g * B + t / N);
      int64_t to = local * N + t % N;
      for (int64_t j = 0; j < r.k; ++j) {
        Slot s = c.slot[g][t * r.k + j];
        int64_t at = (s.l * r.R + s.row) * M;
        float wt = w[g][t * r.k + j];
        double d = 0;
        for (int64_t a = 0; a < M; ++a) {
          float v = wt * eo[s.to][at + a];
          if (withResidual && j == 0)
            v += h[s.to][at + a];
          want[dest][to * M + a] += v;
          float dd = dy[dest][to * M + a];
          wantDeo[s.to][at + a] = wt * dd;
          if (withResidual && j == 0)
            wantDh[s.to][at + a] = dd;
          float prod = dd * eo[s.to][at + a];
          d += prod;
        }
        wantDw[g][t * r.k + j] = float(d);
      }
    }
  for (int64_t g = 0; g < r.G; ++g) {
    std::string rank = " of rank " + std::to_string(g);
    expectSame(out[g], want[g], "placed out" + rank);
    expectSame(deo[g], wantDeo[g], "placed dexpert_out" + rank);
    expectSame(dw[g], wantDw[g], "placed dweights" + rank);
    if (withResidual)
      expectSame(dh[g], wantDh[g], "placed dresidual" + rank);
  }
}

TEST(DevicePlacement, ThePlacingCombineSendsEachSampleToItsNewRank) {
  // T = B N tokens: B samples per rank.
  for (Shape sh : {Shape{2, 2, 6, 2}, Shape{4, 1, 8, 2}, Shape{4, 2, 4, 3},
                   Shape{1, 3, 4, 2}})
    for (unsigned seed : {0u, 5u, 9u})
      for (bool residual : {false, true})
        for (bool table : {false, true}) {
          SCOPED_TRACE(name(sh) + " placement seed " + std::to_string(seed) +
                       (residual ? " residual" : "") +
                       (table ? " expert placement" : ""));
          const int64_t B = 2;
          Case whole(sh.G, sh.El, sh.T, sh.k, 3, unsigned(sh.G + 7 * seed));
          std::vector<int64_t> slots = scrambled(whole.r.E);
          Case c = table ? whole.placed(slots) : whole;
          if (table)
            c.r.slots = slots.data();
          checkPlaced(c, B, placementOf(sh.G, B, seed), residual);
        }
}

TEST(DevicePlacement, ABadPlacementFailsEveryRankByTheCpuOpsWords) {
  Case c(2, 2, 4, 2, 3, 31);
  std::vector<int64_t> place = {0, 0, 0, 1}; // rank 0 would get 3 samples
  std::vector<std::string> messages(2);
  SimGroup group(2);
  runRanks(2, [&](int64_t g) {
    std::vector<float> eo(c.expertSide()), w(c.r.T * c.r.k),
        out(c.r.T * c.r.M);
    CheckedExecutor ex;
    SimLink link(group, g);
    EXPECT_EQ(dev::combineVPlaced(ex, link, c.on(g), 2, eo.data(),
                                  c.idx[g].data(), w.data(), nullptr,
                                  place.data(), out.data()),
              MOE_RT_INVALID_ARGUMENT);
    messages[g] = moe_rt_last_error();
  });
  EXPECT_EQ(group.exchanges, 0);
  for (const std::string &m : messages)
    EXPECT_EQ(m, "moe_rt_combine_v_place: rank 0 would receive 3 samples, not "
                 "2 (a placement keeps B per rank)");
}

TEST(DevicePlacement, MoveSamplesPicksEachRanksNewSamplesInOrder) {
  for (int64_t G : {1, 2, 4})
    for (unsigned seed : {0u, 3u, 8u}) {
      const int64_t B = 3, row = 5;
      SCOPED_TRACE("G=" + std::to_string(G) + " seed " + std::to_string(seed));
      std::vector<int64_t> place = placementOf(G, B, seed);
      std::vector<std::vector<int64_t>> x(G), out(G);
      for (int64_t g = 0; g < G; ++g) {
        for (int64_t i = 0; i < B * row; ++i)
          x[g].push_back(g * 1000 + i);
        out[g].assign(B * row, -1);
      }
      SimGroup group(G);
      runRanks(G, [&](int64_t g) {
        CheckedExecutor ex;
        SimLink link(group, g);
        EXPECT_EQ(dev::moveSamples(ex, link, G, g, B, row, place.data(),
                                   x[g].data(), out[g].data()),
                  MOE_RT_OK)
            << moe_rt_last_error();
      });
      for (int64_t s = 0; s < G * B; ++s) {
        auto [dest, local] = newHome(place, s);
        for (int64_t i = 0; i < row; ++i)
          EXPECT_EQ(out[dest][local * row + i], x[s / B][(s % B) * row + i])
              << "sample " << s;
      }
    }
  // A placement that does not keep B per rank: the CPU op's words.
  std::vector<int64_t> bad = {0, 0, 0, 1}, picks;
  EXPECT_EQ(moe_rt::kernels::samplePicks(2, 2, 1, bad.data(), picks),
            "the placement gives rank 1 1 samples, not its 2");
  std::vector<std::string> messages(2);
  SimGroup group(2);
  runRanks(2, [&](int64_t g) {
    std::vector<int64_t> x(4), out(4);
    CheckedExecutor ex;
    SimLink link(group, g);
    EXPECT_EQ(dev::moveSamples(ex, link, 2, g, 2, 2, bad.data(), x.data(),
                               out.data()),
              MOE_RT_INVALID_ARGUMENT);
    messages[g] = moe_rt_last_error();
  });
  EXPECT_EQ(messages[1], "moe_rt_move_samples: the placement gives rank 1 1 "
                         "samples, not its 2");
}

//===--- experts over their filled rows -----------------------------------===//

/// rows-only link: the expert ops read `rows` and nothing else.
struct HostReads {
  int64_t reads = 0;
  moe_rt_status toHost(void *dst, const void *src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    ++reads;
    return MOE_RT_OK;
  }
};

TEST(DeviceVarExpert, FilledRowsMatchTheCpuOpsAndTailsAreZero) {
  const int64_t El = 3, G = 2, R = 6, M = 5, H = 7;
  // Expert 0 full, expert 1 empty, expert 2 with one row.
  Tensor rows({El, G}, MOE_RT_I64);
  const int64_t filled[] = {4, 2, 0, 0, 0, 1};
  std::copy(filled, filled + El * G, rows.i());
  for (moe_rt_activation act : {MOE_RT_RELU, MOE_RT_GELU, MOE_RT_SILU})
    for (bool gated : {false, true}) {
      SCOPED_TRACE("act=" + std::to_string(int(act)) + (gated ? " gated" : ""));
      Tensor x({El, R, M}), up({El, M, H}), gate({El, M, H}), down({El, H, M}),
          dout({El, R, M}), out({El, R, M}), dx({El, R, M}), dup({El, M, H}),
          dgate({El, M, H}), ddown({El, H, M});
      unsigned seed = 700 + unsigned(act) * 10 + gated;
      moe_rt_test::fillRandom(x, seed);
      moe_rt_test::fillRandom(up, seed + 1, 0.5f);
      moe_rt_test::fillRandom(gate, seed + 2, 0.5f);
      moe_rt_test::fillRandom(down, seed + 3, 0.5f);
      moe_rt_test::fillRandom(dout, seed + 4);
      moe_rt_stream s = nullptr;
      ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &s), MOE_RT_OK);
      ASSERT_EQ(moe_rt_expert_v(s, act, &rows, &x, &up, gated ? &gate : nullptr,
                                &down, &out),
                MOE_RT_OK);
      ASSERT_EQ(moe_rt_expert_v_grad(s, act, &rows, &x, &up,
                                     gated ? &gate : nullptr, &down, &dout, &dx,
                                     &dup, gated ? &dgate : nullptr, &ddown),
                MOE_RT_OK);
      ASSERT_EQ(moe_rt_stream_synchronize(s, 10.0), MOE_RT_OK);
      moe_rt_stream_destroy(s);

      dev::ExpertShape f;
      f.experts = El;
      f.slots = R;
      f.m = M;
      f.h = H;
      auto stale = [](Tensor &t) { return std::vector<float>(t.n(), 9.0f); };
      std::vector<float> y = stale(out), gx = stale(dx), gup = stale(dup),
                         ggate = stale(dgate), gdown = stale(ddown);
      CheckedExecutor ex, bx;
      HostReads link;
      ASSERT_EQ(dev::expertV(ex, link, act, f, G, rows.i(), x.f(), up.f(),
                             gated ? gate.f() : nullptr, down.f(), y.data()),
                MOE_RT_OK);
      ASSERT_EQ(dev::expertVGrad(bx, link, act, f, G, rows.i(), x.f(), up.f(),
                                 gated ? gate.f() : nullptr, down.f(), dout.f(),
                                 gx.data(), gup.data(),
                                 gated ? ggate.data() : nullptr, gdown.data()),
                MOE_RT_OK);
      EXPECT_EQ(link.reads, 2);
      // One GEMM per expert with rows (two of three), per projection.
      EXPECT_EQ(ex.gemms(), 2 * (gated ? 3 : 2));
      auto close = [](const std::vector<float> &got, Tensor &want,
                      const char *what) {
        for (int64_t i = 0; i < want.n(); ++i)
          if (!(std::fabs(double(got[i]) - want.f()[i]) <=
                1e-4 * (1 + std::fabs(double(want.f()[i]))))) {
            ADD_FAILURE() << what << "[" << i << "] = " << got[i]
                          << ", expected " << want.f()[i];
            return;
          }
      };
      close(y, out, "y");
      close(gx, dx, "dx");
      close(gup, dup, "dup");
      close(gdown, ddown, "ddown");
      if (gated)
        close(ggate, dgate, "dgate");
      // Expert 2 has 1 row: its rows 1..5 and all of expert 1 are zero.
      for (int64_t i = (2 * R + 1) * M; i < 3 * R * M; ++i)
        ASSERT_EQ(y[i], 0.0f) << i;
      for (int64_t i = R * M; i < 2 * R * M; ++i)
        ASSERT_EQ(y[i], 0.0f) << i;
      EXPECT_GT(maxAbs(y), 1e-3);
    }
}

TEST(DeviceVarExpert, RowsOverTheBufferAreRefusedByName) {
  dev::ExpertShape f;
  f.experts = 2;
  f.slots = 3;
  f.m = f.h = 2;
  std::vector<int64_t> rows = {1, 1, 2, 2}; // expert 1: 4 rows > 3
  std::vector<float> w(16), y(12);
  CheckedExecutor ex;
  HostReads link;
  EXPECT_EQ(dev::expertV(ex, link, MOE_RT_RELU, f, 2, rows.data(), w.data(),
                         w.data(), nullptr, w.data(), y.data()),
            MOE_RT_INVALID_ARGUMENT);
  EXPECT_STREQ(moe_rt_last_error(),
               "moe_rt_expert_v: rows of local expert 1 do not fit its 3 rows");
}

//===--- the CUDA entry points --------------------------------------------===//

#ifdef MOE_RT_HAVE_CUDA
// Without a GPU the entry points still link and, handed a CPU stream,
// refuse it before reading a pointer or the group (both null here).
TEST(DeviceVarRoutingCuda, EntryPointsRefuseACpuStream) {
  moe_rt_stream s = nullptr;
  ASSERT_EQ(moe_rt_stream_create(MOE_RT_CPU, &s), MOE_RT_OK);
  namespace cu = moe_rt::cuda;
  float *f = nullptr;
  int64_t *ids = nullptr;
  VarRouteShape r;
  r.T = 4;
  r.E = r.El = 2;
  r.R = 4;
  r.M = 3;
  dev::ExpertShape e;
  e.experts = 2;
  e.slots = 4;
  e.m = 3;
  e.h = 5;
  std::vector<std::pair<const char *, moe_rt_status>> calls = {
      {"dispatchV", cu::dispatchV(s, nullptr, r, f, ids, f, ids)},
      {"dispatchVGrad", cu::dispatchVGrad(s, nullptr, r, ids, f, f)},
      {"combineV", cu::combineV(s, nullptr, r, ids, f, ids, f, f)},
      {"combineVGrad",
       cu::combineVGrad(s, nullptr, r, ids, f, ids, f, f, f, f)},
      {"expertV", cu::expertV(s, MOE_RT_SILU, e, 1, ids, f, f, f, f, f)},
      {"expertVGrad", cu::expertVGrad(s, MOE_RT_SILU, e, 1, ids, f, f, nullptr,
                                      f, f, f, f, nullptr, f)},
      {"rowsSum", cu::rowsSum(s, 4, ids, ids, false)},
      {"rowsWindow", cu::rowsWindow(s, moe_rt::RowsWindowShape{}, ids, ids, f,
                                    f)},
      {"rowsPart", cu::rowsPart(s, 4, 0, 2, ids)},
      {"combineVPlaced",
       cu::combineVPlaced(s, nullptr, r, 2, f, ids, f, nullptr, ids, f)},
      {"combineVPlacedGrad", cu::combineVPlacedGrad(s, nullptr, r, 2, f, ids,
                                                    f, ids, f, f, f, nullptr)},
      {"moveSamples", cu::moveSamples(s, nullptr, 2, 0, 2, 1, ids, ids, ids)}};
  for (auto &[what, st] : calls) {
    EXPECT_EQ(st, MOE_RT_INVALID_ARGUMENT) << what;
  }
  EXPECT_NE(std::string(moe_rt_last_error()).find("not a CUDA stream"),
            std::string::npos)
      << moe_rt_last_error();
  moe_rt_stream_destroy(s);
}
#endif

} // namespace
