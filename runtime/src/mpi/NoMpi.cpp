//===- NoMpi.cpp - collectives when built without MPI ---------------------===//

#include "moe_rt/collectives.h"

#include "../Error.h"
#include "MpiCollectives.h"

#include <cstdlib>
#include <string>

using namespace moe_rt;

namespace {
moe_rt_status unavailable(const char *what) {
  return fail(MOE_RT_UNAVAILABLE,
              std::string(what) +
                  ": the runtime was built without MPI (no libopenmpi-dev at "
                  "build time)");
}
} // namespace

extern "C" {
moe_rt_status moe_rt_mpi_init(int *, char ***) {
  return unavailable("moe_rt_mpi_init");
}
moe_rt_status moe_rt_mpi_finalize(void) { return MOE_RT_OK; }
void moe_rt_mpi_abort(int code) { std::exit(code); }
moe_rt_status moe_rt_comm_create_world(double, int, moe_rt_comm *) {
  return unavailable("moe_rt_comm_create_world");
}
moe_rt_status moe_rt_comm_split(moe_rt_comm, int, moe_rt_comm *) {
  return unavailable("moe_rt_comm_split");
}
moe_rt_status moe_rt_comm_destroy(moe_rt_comm) {
  return unavailable("moe_rt_comm_destroy");
}
moe_rt_status moe_rt_comm_end_shape_checks(moe_rt_comm) {
  return unavailable("moe_rt_comm_end_shape_checks");
}
int moe_rt_comm_checks_shapes(moe_rt_comm) { return 0; }
moe_rt_status moe_rt_comm_node_rank(moe_rt_comm, int *, int *) {
  return unavailable("moe_rt_comm_node_rank");
}
int moe_rt_comm_rank(moe_rt_comm) { return -1; }
int moe_rt_comm_size(moe_rt_comm) { return 0; }
double moe_rt_comm_timeout(moe_rt_comm) { return 0; }
moe_rt_status moe_rt_all_reduce(moe_rt_stream, moe_rt_comm, moe_rt_tensor *,
                                int64_t, int64_t) {
  return unavailable("moe_rt_all_reduce");
}
moe_rt_status moe_rt_all_to_all(moe_rt_stream, moe_rt_comm,
                                const moe_rt_tensor *, moe_rt_tensor *) {
  return unavailable("moe_rt_all_to_all");
}
moe_rt_status moe_rt_all_to_all_v(moe_rt_stream, moe_rt_comm,
                                  const moe_rt_tensor *, const int64_t *,
                                  moe_rt_tensor *, const int64_t *) {
  return unavailable("moe_rt_all_to_all_v");
}
moe_rt_status moe_rt_all_gather(moe_rt_stream, moe_rt_comm,
                                const moe_rt_tensor *, moe_rt_tensor *) {
  return unavailable("moe_rt_all_gather");
}
moe_rt_status moe_rt_reduce_scatter(moe_rt_stream, moe_rt_comm,
                                    const moe_rt_tensor *, moe_rt_tensor *) {
  return unavailable("moe_rt_reduce_scatter");
}
moe_rt_status moe_rt_send(moe_rt_stream, moe_rt_comm, const moe_rt_tensor *,
                          int) {
  return unavailable("moe_rt_send");
}
moe_rt_status moe_rt_recv(moe_rt_stream, moe_rt_comm, moe_rt_tensor *, int) {
  return unavailable("moe_rt_recv");
}
}

namespace moe_rt::mpi {
moe_rt_status allGatherCounts(moe_rt_stream, moe_rt_comm, const int64_t *,
                              int64_t *, int64_t) {
  return unavailable("dropless dispatch's counts exchange");
}
moe_rt_status allToAllPlanned(moe_rt_stream, moe_rt_comm,
                              std::shared_ptr<const coll::PeerPlan>,
                              const float *, float *) {
  return unavailable("dropless dispatch's all-to-all-v");
}
moe_rt_status allGatherVPlanned(moe_rt_stream, moe_rt_comm,
                                std::shared_ptr<const VPlan>, const float *,
                                float *) {
  return unavailable("expert sharding's all-gather-v");
}
moe_rt_status reduceScatterVPlanned(moe_rt_stream, moe_rt_comm,
                                    std::shared_ptr<const VPlan>,
                                    const float *, float *) {
  return unavailable("expert sharding's reduce-scatter-v");
}
} // namespace moe_rt::mpi
