//===- CollectivesMpiTest.cpp - collectives across real MPI ranks ---------===//
//
// Run with mpirun -np P (P >= 2). Each rank checks the results it receives
// and prints "rank r: N checks passed"; any failure prints why and exits 1.
//   --hang R      rank R stops responding before a collective: every other
//                 rank must fail within the timeout naming R, and abort.
//   --mismatch    ranks issue all-reduces of different sizes: every rank
//                 must report the mismatch instead of hanging.
//   --die R       rank R exits abruptly before a collective: the job must
//                 end (mpirun kills the others) instead of hanging.
//   --p2p-stall   rank 0 receives from rank 1, which never sends: rank 0
//                 must fail within the timeout naming rank 1, and abort.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/collectives.h"
#include "moe_rt/ops.h"

#include "MpiChecks.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace mpi_checks;

namespace {

float *f(moe_rt_tensor &t) { return static_cast<float *>(t.data); }

} // namespace

int main(int argc, char **argv) {
  int hang = -1, die = -1;
  bool mismatch = false, p2pStall = false;
  double timeout = 20.0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--hang") && i + 1 < argc)
      hang = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--die") && i + 1 < argc)
      die = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--mismatch"))
      mismatch = true;
    else if (!std::strcmp(argv[i], "--p2p-stall"))
      p2pStall = true;
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
  if (p2pStall) {
    if (rank != 0) { // alive, but never posts the send rank 0 waits for
      std::this_thread::sleep_for(std::chrono::seconds(120));
      return 0;
    }
    moe_rt_tensor t = make({16});
    auto start = std::chrono::steady_clock::now();
    ok(moe_rt_recv(pool, world, &t, 1), "enqueue recv");
    moe_rt_status s = moe_rt_stream_synchronize(pool, 0);
    double took = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start)
                      .count();
    std::fprintf(stderr, "rank %d: %s: %s\n", rank, moe_rt_status_name(s),
                 moe_rt_last_error());
    // Within the timeout (plus the pool's polling), not the 120 s sleep.
    std::fprintf(stderr, "rank %d: recv failed %s the timeout\n", rank,
                 took < timeout + 2.0 ? "within" : "long after");
    moe_rt_mpi_abort(3);
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

  // Point-to-point (moe_rt_send / moe_rt_recv).
  {
    // A ring on the pool: rank r sends 1000 r + i to r + 1 and receives
    // from r - 1. Sends complete only once matched, so even ranks send
    // first and odd ranks receive first.
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    moe_rt_tensor out = make({5}), in = make({5});
    for (int i = 0; i < 5; ++i) {
      f(out)[i] = 1000.0f * rank + i;
      f(in)[i] = -1.0f;
    }
    if (rank % 2 == 0) {
      ok(moe_rt_send(pool, world, &out, next), "ring send");
      ok(moe_rt_recv(pool, world, &in, prev), "ring recv");
    } else {
      ok(moe_rt_recv(pool, world, &in, prev), "ring recv");
      ok(moe_rt_send(pool, world, &out, next), "ring send");
    }
    ok(moe_rt_stream_synchronize(pool, 60.0), "synchronize ring");
    for (int i = 0; i < 5; ++i)
      expect(f(in)[i] == 1000.0f * prev + i,
             "ring: value " + std::to_string(i) + " from rank " +
                 std::to_string(prev));

    // Both ways at once between partners 2k and 2k + 1: sends on the pool,
    // recvs on the plain stream, so each rank's send and recv are in
    // flight together (a send's header must not meet the peer's recv's).
    int partner = rank ^ 1;
    if (partner < size) {
      moe_rt_tensor there = make({3}), back = make({3});
      for (int i = 0; i < 3; ++i) {
        f(there)[i] = 10.0f * rank + i;
        f(back)[i] = -1.0f;
      }
      ok(moe_rt_send(pool, world, &there, partner), "both-ways send");
      ok(moe_rt_recv(compute, world, &back, partner), "both-ways recv");
      ok(moe_rt_stream_synchronize(pool, 60.0), "synchronize both-ways");
      ok(moe_rt_stream_synchronize(compute, 60.0), "synchronize both-ways");
      for (int i = 0; i < 3; ++i)
        expect(f(back)[i] == 10.0f * partner + i, "both-ways value");
    }

    // Several messages from rank 0 to rank 1 (I64, any dtype goes) arrive
    // in the order they were sent; rank 1 receives them on a plain stream.
    const int messages = 4;
    std::vector<moe_rt_tensor> seq;
    int64_t shape[] = {3};
    for (int k = 0; k < messages; ++k) {
      moe_rt_tensor t;
      ok(moe_rt_tensor_create(MOE_RT_CPU, MOE_RT_I64, 1, shape, &t), "i64");
      for (int i = 0; i < 3; ++i)
        static_cast<int64_t *>(t.data)[i] = rank == 0 ? 100 * k + i : -1;
      seq.push_back(t);
    }
    for (int k = 0; k < messages; ++k) {
      if (rank == 0)
        ok(moe_rt_send(pool, world, &seq[k], 1), "ordered send");
      else if (rank == 1)
        ok(moe_rt_recv(compute, world, &seq[k], 0), "ordered recv");
    }
    ok(moe_rt_stream_synchronize(pool, 60.0), "synchronize ordered sends");
    ok(moe_rt_stream_synchronize(compute, 60.0), "synchronize ordered recvs");
    if (rank == 1)
      for (int k = 0; k < messages; ++k)
        for (int i = 0; i < 3; ++i)
          expect(static_cast<int64_t *>(seq[k].data)[i] == 100 * k + i,
                 "message " + std::to_string(k) + " arrives in order");

    // Mismatches between ranks 0 and 1 (sizes, then dtypes) fail both
    // sides with the same message, before any byte moves; the
    // communicator still works afterwards. Fresh streams: errors stick.
    struct Case {
      moe_rt_dtype sendType, recvType;
      int64_t sendCount, recvCount;
      const char *message;
    } cases[] = {
        {MOE_RT_F32, MOE_RT_F32, 4, 5,
         "send/recv mismatch between ranks 0 and 1: rank 0 issued send of "
         "16 B of f32 while rank 1 issued recv of 20 B of f32"},
        {MOE_RT_I32, MOE_RT_F32, 4, 4,
         "send/recv mismatch between ranks 0 and 1: rank 0 issued send of "
         "16 B of i32 while rank 1 issued recv of 16 B of f32"},
    };
    for (const Case &k : cases) {
      if (rank > 1)
        break;
      moe_rt_stream s;
      ok(moe_rt_stream_create(MOE_RT_CPU, &s), "mismatch stream");
      moe_rt_tensor t;
      int64_t n = rank == 0 ? k.sendCount : k.recvCount;
      ok(moe_rt_tensor_create(MOE_RT_CPU, rank == 0 ? k.sendType : k.recvType,
                              1, &n, &t),
         "mismatch tensor");
      for (int64_t i = 0; i < n; ++i)
        static_cast<int32_t *>(t.data)[i] = rank == 0 ? 7 : -5;
      ok(rank == 0 ? moe_rt_send(s, world, &t, 1) : moe_rt_recv(s, world, &t, 0),
         "enqueue mismatched transfer");
      moe_rt_status st = moe_rt_stream_synchronize(s, 60.0);
      std::string why = moe_rt_last_error();
      std::printf("rank %d: p2p %s: %s\n", rank, moe_rt_status_name(st),
                  why.c_str());
      expect(st == MOE_RT_INVALID_ARGUMENT &&
                 why.find(k.message) != std::string::npos,
             "mismatch reported on this rank: " + why);
      for (int64_t i = 0; rank == 1 && i < n; ++i)
        expect(static_cast<int32_t *>(t.data)[i] == -5,
               "a mismatched recv leaves its tensor alone");
      moe_rt_stream_destroy(s);
      moe_rt_tensor_destroy(&t);
    }
    // Still usable after a mismatch: 1 sends back to 0.
    if (rank <= 1) {
      moe_rt_tensor t = make({2});
      f(t)[0] = rank == 1 ? 42.0f : 0.0f;
      f(t)[1] = rank == 1 ? 43.0f : 0.0f;
      ok(rank == 1 ? moe_rt_send(pool, world, &t, 0)
                   : moe_rt_recv(pool, world, &t, 1),
         "transfer after mismatch");
      ok(moe_rt_stream_synchronize(pool, 60.0), "synchronize after mismatch");
      expect(f(t)[0] == 42.0f && f(t)[1] == 43.0f,
             "transfer after a mismatch delivers");
    }

    // Without shape checks MPI itself still refuses a wrong size: a recv
    // that gets fewer bytes, or would get more, fails on the receiver.
    moe_rt_comm unchecked;
    ok(moe_rt_comm_create_world(timeout, /*check_shapes=*/0, &unchecked),
       "unchecked world");
    for (int64_t sent : {int64_t(4), int64_t(6)}) {
      if (rank > 1)
        break;
      moe_rt_stream s;
      ok(moe_rt_stream_create(MOE_RT_CPU, &s), "unchecked stream");
      moe_rt_tensor t = make({rank == 0 ? sent : 5});
      ok(rank == 0 ? moe_rt_send(s, unchecked, &t, 1)
                   : moe_rt_recv(s, unchecked, &t, 0),
         "enqueue unchecked transfer");
      moe_rt_status st = moe_rt_stream_synchronize(s, 60.0);
      std::string why = moe_rt_last_error();
      if (rank == 1)
        expect(st == MOE_RT_INVALID_ARGUMENT &&
                   why.find("send/recv mismatch") != std::string::npos,
               "unchecked size mismatch fails the recv: " + why);
      moe_rt_stream_destroy(s);
      moe_rt_tensor_destroy(&t);
    }
    moe_rt_comm_destroy(unchecked);

    // Bad arguments are refused when the call is made.
    moe_rt_tensor fake = out;
    fake.backend = MOE_RT_CUDA; // never dereferenced: refused first
    struct Bad {
      moe_rt_comm comm;
      const moe_rt_tensor *t;
      int peer;
      const char *why;
    } bad[] = {
        {world, nullptr, next, "NULL"},
        {nullptr, &out, next, "NULL"},
        {world, &out, size, "is not a rank of the group"},
        {world, &out, -1, "is not a rank of the group"},
        {world, &out, rank, "is this rank itself"},
        {world, &fake, next, "needs a tensor in CPU memory"},
    };
    for (const Bad &b : bad) {
      moe_rt_status st = moe_rt_send(pool, b.comm, b.t, b.peer);
      std::string why = moe_rt_last_error();
      expect(st == MOE_RT_INVALID_ARGUMENT &&
                 why.find("moe_rt_send") != std::string::npos &&
                 why.find(b.why) != std::string::npos,
             std::string("send refuses a bad argument (") + b.why + "): " + why);
      st = moe_rt_recv(pool, b.comm, const_cast<moe_rt_tensor *>(b.t), b.peer);
      why = moe_rt_last_error();
      expect(st == MOE_RT_INVALID_ARGUMENT &&
                 why.find("moe_rt_recv") != std::string::npos &&
                 why.find(b.why) != std::string::npos,
             std::string("recv refuses a bad argument (") + b.why + "): " + why);
    }
    expect(moe_rt_send(nullptr, world, &out, next) == MOE_RT_INVALID_ARGUMENT,
           "send refuses a NULL stream");
    ok(moe_rt_stream_synchronize(pool, 60.0), "pool unaffected by refusals");
  }

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

  // A group of all-reduces (moe.all_reduce of several gradients): one
  // collective of the ranges packed; the same sums as one at a time, the
  // bytes outside a chunk's range copied, not summed.
  {
    moe_rt_tensor g1 = make({5}), g2 = make({2, 3}), g3 = make({4});
    moe_rt_tensor o1 = make({5}), o2 = make({2, 3}), o3 = make({4});
    for (int i = 0; i < 5; ++i)
      f(g1)[i] = float(rank + 1) * float(i);
    for (int i = 0; i < 6; ++i)
      f(g2)[i] = float(rank) + 10.0f * float(i);
    for (int i = 0; i < 4; ++i)
      f(g3)[i] = 1.0f;
    ok(moe_rt_all_reduce_group_begin(pool), "group begin");
    expect(moe_rt_all_reduce_group_begin(pool) == MOE_RT_INVALID_ARGUMENT,
           "a second open group on one stream is refused");
    ok(moe_rt_all_reduce_into(pool, world, &g1, &o1, 0, -1), "group member 1");
    ok(moe_rt_all_reduce_into(pool, world, &g2, &o2, 8, 12), "group member 2");
    ok(moe_rt_all_reduce_into(pool, world, &g3, &o3, 0, -1), "group member 3");
    ok(moe_rt_all_reduce_group_end(pool), "group end");
    ok(moe_rt_stream_synchronize(pool, 60.0), "synchronize group");
    float ranks = float(size) * float(size - 1) / 2; // sum of ranks
    bool same = true;
    for (int i = 0; i < 5; ++i)
      same &= f(o1)[i] == float(size) * float(size + 1) / 2 * float(i);
    for (int i = 0; i < 6; ++i) // elements 2..4 summed, the rest copied
      same &= f(o2)[i] == (i >= 2 && i < 5
                               ? ranks + float(size) * 10.0f * float(i)
                               : float(rank) + 10.0f * float(i));
    for (int i = 0; i < 4; ++i)
      same &= f(o3)[i] == float(size);
    expect(same, "grouped all-reduce equals one at a time");
    expect(moe_rt_all_reduce_group_end(pool) == MOE_RT_INVALID_ARGUMENT,
           "ending a group that is not open is refused");
    ok(moe_rt_all_reduce_group_begin(pool), "group begin 2");
    ok(moe_rt_all_reduce_into(pool, world, &g1, &o1, 0, -1), "member");
    ok(moe_rt_all_reduce_into(pool, half, &g3, &o3, 0, -1), "other group");
    expect(moe_rt_all_reduce_group_end(pool) == MOE_RT_INVALID_ARGUMENT,
           "a group over two groups of ranks is refused");
  }

  // Ending the signature checks after a first step (moe-run, generated
  // steps): on the world and every group split from it, before or after.
  expect(moe_rt_comm_checks_shapes(world) == 1 &&
             moe_rt_comm_checks_shapes(half) == 1,
         "signature checks on while the first step runs");
  ok(moe_rt_comm_end_shape_checks(world), "end shape checks");
  moe_rt_comm later;
  ok(moe_rt_comm_split(world, rank % 2, &later), "split after the checks");
  expect(moe_rt_comm_checks_shapes(world) == 0 &&
             moe_rt_comm_checks_shapes(half) == 0 &&
             moe_rt_comm_checks_shapes(later) == 0,
         "signature checks off on the world and its groups");
  moe_rt_tensor unchecked = make({6});
  for (int i = 0; i < 6; ++i)
    f(unchecked)[i] = float(rank + i);
  ok(moe_rt_all_reduce(pool, later, &unchecked, 0, -1), "unchecked reduce");
  ok(moe_rt_stream_synchronize(pool, 60.0), "synchronize unchecked");
  {
    int n = moe_rt_comm_size(later);
    float ranks = 0; // the sum of the group's ranks (world numbering)
    for (int r = rank % 2; r < size; r += 2)
      ranks += float(r);
    expect(f(unchecked)[5] == ranks + 5.0f * float(n),
           "unchecked all-reduce still sums");
  }
  moe_rt_comm_destroy(later);

  std::printf("rank %d: %d checks passed\n", rank, checks);
  std::fflush(stdout);
  moe_rt_comm_destroy(half);
  moe_rt_comm_destroy(world);
  moe_rt_stream_destroy(pool);
  moe_rt_stream_destroy(compute);
  moe_rt_mpi_finalize();
  return 0;
}
