//===- CollectivesMpiTest.cpp - collectives across real MPI ranks
//----------===//
//
// Run with mpirun -np P (P >= 2). Each rank checks the results it receives
// and prints "rank r: N checks passed"; any failure prints why and exits 1.
//   --hang R      rank R stops responding before a collective: every other
//                 rank must fail within the timeout naming R, and abort.
//   --mismatch    ranks issue all-reduces of different sizes: every rank
//                 must report the mismatch instead of hanging.
//   --die R       rank R exits abruptly before a collective: the job must
//                 end (mpirun kills the others) instead of hanging.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/collectives.h"
#include "moe_rt/ops.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

int rank = 0, size = 1, checks = 0;

void expect(bool ok, const std::string &what) {
  if (ok) {
    ++checks;
    return;
  }
  std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  std::exit(1);
}

void ok(moe_rt_status s, const char *what) {
  expect(s == MOE_RT_OK, std::string(what) + ": " + moe_rt_status_name(s) +
                             " " + moe_rt_last_error());
}

moe_rt_tensor make(std::vector<int64_t> shape) {
  moe_rt_tensor t;
  ok(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_F32, int(shape.size()),
                          shape.data(), &t),
     "tensor");
  return t;
}
float *f(moe_rt_tensor &t) { return static_cast<float *>(t.data); }

} // namespace

int main(int argc, char **argv) {
  int hang = -1, die = -1;
  bool mismatch = false;
  double timeout = 20.0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--hang") && i + 1 < argc)
      hang = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--die") && i + 1 < argc)
      die = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--mismatch"))
      mismatch = true;
    else if (!std::strcmp(argv[i], "--timeout") && i + 1 < argc)
      timeout = std::atof(argv[++i]);
  }
  ok(moe_rt_mpi_init(&argc, &argv), "mpi init");
  moe_rt_comm world;
  ok(moe_rt_comm_create_world(timeout, /*check_shapes=*/1, &world), "world");
  rank = moe_rt_comm_rank(world);
  size = moe_rt_comm_size(world);
  moe_rt_stream pool, compute;
  ok(moe_rt_stream_create_pool(&pool), "pool");
  ok(moe_rt_stream_create(MOE_RT_CPU, &compute), "compute stream");

  if (die >= 0) {
    if (rank == die)
      std::_Exit(9);
    moe_rt_tensor t = make({16});
    ok(moe_rt_all_reduce(pool, world, &t, 0, -1), "enqueue");
    moe_rt_status s = moe_rt_stream_synchronize(pool, 0);
    std::fprintf(stderr, "rank %d: %s: %s\n", rank, moe_rt_status_name(s),
                 moe_rt_last_error());
    moe_rt_mpi_abort(3);
  }
  if (hang >= 0) {
    if (rank == hang) {
      std::this_thread::sleep_for(std::chrono::seconds(120));
      return 0;
    }
    moe_rt_tensor t = make({16});
    ok(moe_rt_all_reduce(pool, world, &t, 0, -1), "enqueue");
    moe_rt_status s = moe_rt_stream_synchronize(pool, 0);
    std::fprintf(stderr, "rank %d: %s: %s\n", rank, moe_rt_status_name(s),
                 moe_rt_last_error());
    moe_rt_mpi_abort(3); // no rank may wait on the dead one
  }
  if (mismatch) {
    moe_rt_tensor t = make({16 * (rank + 1)});
    ok(moe_rt_all_reduce(pool, world, &t, 0, -1), "enqueue");
    moe_rt_status s = moe_rt_stream_synchronize(pool, 0);
    std::fprintf(stderr, "rank %d: %s: %s\n", rank, moe_rt_status_name(s),
                 moe_rt_last_error());
    moe_rt_mpi_abort(s == MOE_RT_OK ? 0 : 4);
  }

  // All-reduce of a whole tensor, and of a byte range (a FlowMoE chunk).
  moe_rt_tensor a = make({4, 8}), c = make({32});
  for (int i = 0; i < 32; ++i) {
    f(a)[i] = float(rank + 1) * (i + 1);
    f(c)[i] = float(rank + 1);
  }
  ok(moe_rt_all_reduce(pool, world, &a, 0, -1), "all_reduce");
  ok(moe_rt_all_reduce(pool, world, &c, 16, 32), "all_reduce chunk");
  // All-to-all: rank r sends value 100 r + j to rank j.
  moe_rt_tensor s = make({int64_t(size), 3}), r = make({int64_t(size), 3});
  for (int j = 0; j < size; ++j)
    for (int k = 0; k < 3; ++k)
      f(s)[j * 3 + k] = 100.0f * rank + j + 0.01f * k;
  ok(moe_rt_all_to_all(pool, world, &s, &r), "all_to_all");
  // All-to-all-v: rank i sends j + 1 rows (of 2) to rank j.
  std::vector<int64_t> sendRows(size), recvRows(size);
  int64_t sendTotal = 0, recvTotal = 0;
  for (int j = 0; j < size; ++j) {
    sendRows[j] = j + 1;
    recvRows[j] = rank + 1;
    sendTotal += sendRows[j];
    recvTotal += recvRows[j];
  }
  moe_rt_tensor sv = make({sendTotal, 2}), rv = make({recvTotal, 2});
  for (int64_t i = 0; i < sendTotal * 2; ++i)
    f(sv)[i] = 1000.0f * rank + float(i);
  ok(moe_rt_all_to_all_v(pool, world, &sv, sendRows.data(), &rv,
                         recvRows.data()),
     "all_to_all_v");
  // All-gather and reduce-scatter.
  moe_rt_tensor g = make({2}), gathered = make({int64_t(2 * size)});
  f(g)[0] = float(rank);
  f(g)[1] = float(rank) + 0.5f;
  ok(moe_rt_all_gather(pool, world, &g, &gathered), "all_gather");
  moe_rt_tensor rsIn = make({int64_t(size), 2}), rsOut = make({2});
  for (int i = 0; i < 2 * size; ++i)
    f(rsIn)[i] = float(i);
  ok(moe_rt_reduce_scatter(pool, world, &rsIn, &rsOut), "reduce_scatter");
  ok(moe_rt_stream_synchronize(pool, 60.0), "synchronize");

  float n = float(size) * (size + 1) / 2;
  for (int i = 0; i < 32; ++i) {
    expect(f(a)[i] == n * (i + 1), "all_reduce value");
    bool inRange = i >= 4 && i < 12;
    expect(f(c)[i] == (inRange ? n : float(rank + 1)),
           "chunk reduces only bytes [16, 48)");
  }
  for (int i = 0; i < size; ++i)
    for (int k = 0; k < 3; ++k)
      expect(std::abs(f(r)[i * 3 + k] - (100.0f * i + rank + 0.01f * k)) <
                 1e-4f,
             "all_to_all part from rank " + std::to_string(i));
  int64_t row = 0;
  for (int i = 0; i < size; ++i) {
    // Rank i's send offset to me: rows 1 + 2 + ... + rank before mine.
    int64_t offset = int64_t(rank) * (rank + 1) / 2;
    for (int64_t k = 0; k < rank + 1; ++k, ++row)
      for (int e = 0; e < 2; ++e)
        expect(f(rv)[row * 2 + e] == 1000.0f * i + float((offset + k) * 2 + e),
               "all_to_all_v row from rank " + std::to_string(i));
  }
  for (int i = 0; i < size; ++i)
    expect(f(gathered)[2 * i] == float(i) &&
               f(gathered)[2 * i + 1] == float(i) + 0.5f,
           "all_gather");
  expect(f(rsOut)[0] == float(size) * (2 * rank) &&
             f(rsOut)[1] == float(size) * (2 * rank + 1),
         "reduce_scatter");

  // A group: even and odd ranks.
  moe_rt_comm half;
  ok(moe_rt_comm_split(world, rank % 2, &half), "split");
  moe_rt_tensor h = make({4});
  for (int i = 0; i < 4; ++i)
    f(h)[i] = 1.0f;
  ok(moe_rt_all_reduce(pool, half, &h, 0, -1), "group all_reduce");
  ok(moe_rt_stream_synchronize(pool, 60.0), "synchronize group");
  expect(f(h)[0] == float(moe_rt_comm_size(half)), "group size sum");

  // Bad arguments come back as errors.
  expect(moe_rt_all_reduce(pool, world, &c, 2, 4) == MOE_RT_INVALID_ARGUMENT,
         "misaligned range rejected");
  moe_rt_tensor odd = make({int64_t(size) + 1});
  expect(moe_rt_all_to_all(pool, world, &odd, &odd) == MOE_RT_INVALID_ARGUMENT,
         "indivisible all_to_all rejected");

  // moe_rt_dispatch / moe_rt_combine (moe_rt/ops.h): one expert per rank,
  // top-1, capacity large enough that nothing drops. Dispatch is then a
  // permutation: combining with weight 1 through identity experts, or
  // taking dispatch's vjp of its own output, gives x back.
  {
    const int64_t tokens = 4, model = 3, capacity = tokens;
    const int64_t experts = size;
    moe_rt_tensor x = make({tokens, model}), back = make({tokens, model}),
                  dx = make({tokens, model}), w = make({tokens, 1}),
                  routed = make({1, size * capacity, model});
    moe_rt_tensor idx;
    int64_t idxShape[] = {tokens, 1};
    ok(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_I64, 2, idxShape, &idx),
       "indices");
    for (int64_t t = 0; t < tokens; ++t) {
      static_cast<int64_t *>(idx.data)[t] = (rank + t) % experts;
      f(w)[t] = 1.0f;
      for (int64_t m = 0; m < model; ++m)
        f(x)[t * model + m] = 10.0f * (rank + 1) + t + 0.1f * m;
    }
    ok(moe_rt_dispatch(pool, world, experts, capacity, &x, &idx, &routed),
       "dispatch");
    ok(moe_rt_combine(pool, world, experts, capacity, &routed, &idx, &w, &back),
       "combine");
    ok(moe_rt_dispatch_grad(pool, world, experts, capacity, &idx, &routed, &dx),
       "dispatch_grad");
    ok(moe_rt_stream_synchronize(pool, 60.0), "synchronize routing");
    int64_t filled = 0, want = 0;
    for (int i = 0; i < size; ++i)
      for (int64_t t = 0; t < tokens; ++t)
        want += (i + t) % experts == rank;
    for (int64_t row = 0; row < size * capacity; ++row)
      filled += f(routed)[row * model] != 0.0f;
    expect(filled == want, "dispatch delivers every token routed here");
    for (int64_t i = 0; i < tokens * model; ++i) {
      expect(std::abs(f(back)[i] - f(x)[i]) < 1e-5f,
             "combine(dispatch(x)) == x");
      expect(std::abs(f(dx)[i] - f(x)[i]) < 1e-5f,
             "dispatch vjp of dispatch(x) == x");
    }
    moe_rt_tensor smallOut = make({1, capacity, model});
    expect(size == 1 ||
               moe_rt_dispatch(pool, world, experts, capacity, &x, &idx,
                               &smallOut) == MOE_RT_INVALID_ARGUMENT,
           "dispatch refuses a buffer without G C slots");
  }

  std::printf("rank %d: %d checks passed\n", rank, checks);
  std::fflush(stdout);
  moe_rt_comm_destroy(half);
  moe_rt_comm_destroy(world);
  moe_rt_stream_destroy(pool);
  moe_rt_stream_destroy(compute);
  moe_rt_mpi_finalize();
  return 0;
}
