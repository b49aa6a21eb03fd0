//===- RoutingStatsMpiTest.cpp - routing statistics across MPI ranks ------===//
//
// Run with mpirun -np P (P = 2 or 4). moe_rt_routing_counts on hand-made
// routing: sample b of rank r sends every one of its N tokens to experts
// (r + b) mod E and (r + b + 1) mod E (k = 2, E = 2P), so row r*B + b of
// the gathered matrix holds N in those two columns and 0 elsewhere. Four
// dispatches (micro-batches 0, 1 x blocks 3, 5) are issued out of order;
// the routing log must write them in (micro, block) order to the trace
// (read back here with moe_planning's reader) and print the step's
// balance line, which the .test compares with hand-computed ratios. Last,
// an index outside [0, E) on rank 1 must fail every rank's stream after
// the all-gather (no rank left waiting), naming the index.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/collectives.h"
#include "moe_rt/ops.h"
#include "moe_rt/routing_trace.h"

#include "MpiChecks.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace mpi_checks;

namespace {

constexpr int64_t B = 2, N = 3, K = 2;

moe_rt_tensor makeI64(std::vector<int64_t> shape) {
  return make(std::move(shape), MOE_RT_I64);
}
int64_t *at(moe_rt_tensor &t) { return static_cast<int64_t *>(t.data); }

/// Expert of choice j for sample b of rank r.
int64_t routed(int r, int64_t b, int64_t j, int64_t experts) {
  return (r + b + j) % experts;
}

void fillIndices(moe_rt_tensor &idx, int64_t experts) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < K; ++j)
        at(idx)[(b * N + n) * K + j] = routed(rank, b, j, experts);
}

/// Row r*B + b holds N in its two experts' columns.
void expectGathered(moe_rt_tensor &out, int64_t experts) {
  for (int r = 0; r < size; ++r)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t e = 0; e < experts; ++e) {
        bool hit = e == routed(r, b, 0, experts) || e == routed(r, b, 1, experts);
        int64_t got = at(out)[(r * B + b) * experts + e];
        expect(got == (hit ? N : 0),
               "count of sample " + std::to_string(r * B + b) + ", expert " +
                   std::to_string(e) + " is " + std::to_string(got));
      }
}

void checkTrace(const std::string &path, int64_t experts) {
  using namespace moe_rt::planning;
  TraceHeader h;
  std::vector<TraceRecord> records;
  std::string error;
  expect(readTrace(path, h, records, error), "trace reads back: " + error);
  expect(h.grid.nodes * h.grid.ranksPerNode == size && h.samples == B * size &&
             h.tokensPerSample == N && h.blocks.size() == 2 &&
             h.blocks[0].block == 3 && h.blocks[1].block == 5 &&
             h.blocks[0].topK == K,
         "trace header");
  expect(h.blocks[0].expertRank[experts - 1] == size - 1,
         "experts E/G per rank");
  expect(records.size() == 4, "four records");
  int order[4][2] = {{0, 3}, {0, 5}, {1, 3}, {1, 5}};
  for (int i = 0; i < 4; ++i)
    expect(records[i].step == 7 && records[i].micro == order[i][0] &&
               records[i].block == order[i][1],
           "record " + std::to_string(i) + " in (micro, block) order");
  expect(records[3].counts.at(B * size - 1, routed(size - 1, B - 1, 1,
                                                    experts)) == N,
         "the last sample's counts");
}

} // namespace

int main(int argc, char **argv) {
  ok(moe_rt_mpi_init(&argc, &argv), "mpi init");
  moe_rt_comm world;
  ok(moe_rt_comm_create_world(20.0, /*check_shapes=*/1, &world), "world");
  rank = moe_rt_comm_rank(world);
  size = moe_rt_comm_size(world);
  int64_t experts = 2 * size;
  int nodes = size >= 4 ? 2 : 1;
  moe_rt_stream pool;
  ok(moe_rt_stream_create_pool(&pool), "pool");
  std::string path = argc > 1 ? argv[1] : "routing-stats-test.trace";

  moe_rt_routing_log *log = moe_rt_routing_log_create();
  if (rank == 0)
    ok(moe_rt_routing_log_open_trace(log, path.c_str(), "mpi test"), "open");
  moe_rt_tensor idx = makeI64({B, N, K});
  fillIndices(idx, experts);
  std::vector<moe_rt_tensor> outs;
  int issue[4][2] = {{1, 5}, {0, 3}, {1, 3}, {0, 5}}; // (micro, block)
  for (auto &mb : issue) {
    outs.push_back(makeI64({size * B, experts}));
    moe_rt_routing_site site{mb[1], mb[0], experts, nodes, size / nodes};
    ok(moe_rt_routing_counts(pool, world, log, &site, &idx, &outs.back()),
       "routing counts");
  }
  ok(moe_rt_stream_synchronize(pool, 20.0), "sync");
  for (moe_rt_tensor &out : outs)
    expectGathered(out, experts);
  ok(moe_rt_routing_log_end_step(log, 7), "end step");
  if (rank == 0)
    std::printf("%s\n", moe_rt_routing_log_balance(log));
  ok(moe_rt_routing_log_close(log), "close");
  if (rank == 0)
    checkTrace(path, experts);

  // A grid that does not span the group is refused when the call is made.
  moe_rt_routing_site wrong{3, 0, experts, 3, 1};
  expect(moe_rt_routing_counts(pool, world, log, &wrong, &idx, &outs[0]) ==
             MOE_RT_INVALID_ARGUMENT,
         "a site grid that is not the group is refused");

  // A bad index on rank 1: every rank's stream fails after the gather.
  if (rank == 1)
    at(idx)[5] = experts;
  moe_rt_routing_site site{3, 0, experts, nodes, size / nodes};
  ok(moe_rt_routing_counts(pool, world, nullptr, &site, &idx, &outs[0]),
     "queue");
  moe_rt_status st = moe_rt_stream_synchronize(pool, 20.0);
  if (rank == 1) {
    std::string message = moe_rt_last_error();
    expect(st == MOE_RT_INVALID_ARGUMENT &&
               message.find("index 5 routes to expert " +
                            std::to_string(experts)) != std::string::npos,
           "the bad index is named: " + message);
  } else {
    expect(st == MOE_RT_OK, "the other ranks' gather completes");
  }
  moe_rt_routing_log_destroy(log);
  std::printf("rank %d: %d checks passed\n", rank, checks);
  std::fflush(stdout);
  moe_rt_mpi_finalize();
  return 0;
}
