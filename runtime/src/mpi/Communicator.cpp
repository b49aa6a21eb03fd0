//===- Communicator.cpp - MPI start-up and the groups' lifetime -----------===//
//
// moe_rt_mpi_init / finalize / abort and moe_rt_comm_*: creating, splitting
// and freeing groups (Communicator.h).
//
//===----------------------------------------------------------------------===//

#include "Communicator.h"

#include "../Error.h"
#include "Liveness.h"
#ifdef MOE_RT_HAVE_CUDA
#include "NcclGroups.h"
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

using namespace moe_rt;
using namespace moe_rt::mpi;

moe_rt_comm_impl::~moe_rt_comm_impl() {
#ifdef MOE_RT_HAVE_CUDA
  destroyNccl(*this);
#endif
  // A failed communicator has requests in flight that MPI cannot cancel;
  // leave it to MPI_Abort/MPI_Finalize rather than free it under them.
  if (!failed.empty())
    return;
  for (MPI_Comm *c : {&a2a, &ar, &probe, &p2p, &splits})
    if (*c != MPI_COMM_NULL)
      MPI_Comm_free(c);
}

std::string mpi::mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, length);
}

bool mpi::failedEarlier(moe_rt_comm c, std::string &message,
                        moe_rt_status &status) {
  std::lock_guard<std::mutex> lock(c->mutex);
  if (c->failed.empty())
    return false;
  message = "communicator failed earlier: " + c->failed;
  status = MOE_RT_BACKEND_ERROR;
  return true;
}

moe_rt_status mpi::refuseIfFailed(moe_rt_comm_impl &c) {
  std::lock_guard<std::mutex> lock(c.mutex);
  if (!c.failed.empty())
    return fail(MOE_RT_BACKEND_ERROR, "communicator failed earlier: " +
                                          c.failed);
  return MOE_RT_OK;
}

namespace {

moe_rt_status commFromMpi(MPI_Comm base, double timeout,
                          std::shared_ptr<std::atomic<bool>> checks,
                          moe_rt_comm *out) {
  auto c = std::make_unique<moe_rt_comm_impl>();
  for (MPI_Comm *dup : {&c->a2a, &c->ar, &c->probe, &c->p2p, &c->splits})
    if (int rc = MPI_Comm_dup(base, dup); rc != MPI_SUCCESS)
      return fail(MOE_RT_BACKEND_ERROR, "MPI_Comm_dup: " + mpiError(rc));
  for (MPI_Comm comm : {c->a2a, c->ar, c->probe, c->p2p, c->splits})
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->a2a, &c->rank);
  MPI_Comm_size(c->a2a, &c->size);
  c->timeoutSeconds = timeout;
  c->checkShapesFlag = std::move(checks);
  *out = c.release();
  return ok();
}

/// Waits for a non-blocking MPI call the host thread made (the CUDA path's
/// id broadcast and shape check) up to the communicator's timeout.
/// With peer >= 0 it is a point-to-point exchange and a timeout names the

/// Whether an MPI launcher (mpirun/orterun, prterun, srun with PMI or
/// PMIx) started this process: they all set one of these.
bool launchedByMpi() {
  for (const char *v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
                        "PMI_SIZE"})
    if (std::getenv(v))
      return true;
  return false;
}

bool solo = false;

/// A one-rank group without MPI (moe_rt_comm_impl::solo).
moe_rt_comm soloComm(double timeout, std::shared_ptr<std::atomic<bool>> checks) {
  auto c = std::make_unique<moe_rt_comm_impl>();
  c->solo = true;
  c->timeoutSeconds = timeout;
  c->checkShapesFlag = std::move(checks);
  return c.release();
}

} // namespace

bool mpi::soloProcess() { return solo; }

extern "C" moe_rt_status moe_rt_mpi_init(int *argc, char ***argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized || solo)
    return ok();
  // A process no launcher started is one rank: skip MPI's singleton
  // start-up (issue 12: a CPU run's start-up under 0.1 s).
  // MOE_RT_MPI_SINGLETON=1 initialises MPI anyway.
  const char *force = std::getenv("MOE_RT_MPI_SINGLETON");
  if (!launchedByMpi() && !(force && *force && *force != '0')) {
    solo = true;
    return ok();
  }
  int provided = 0;
  if (int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
      rc != MPI_SUCCESS)
    return fail(MOE_RT_BACKEND_ERROR, "MPI_Init_thread: " + mpiError(rc));
  if (provided < MPI_THREAD_SERIALIZED)
    return fail(MOE_RT_UNAVAILABLE,
                "the MPI library does not support calls from stream threads "
                "(needs at least MPI_THREAD_SERIALIZED)");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return ok();
}

extern "C" moe_rt_status moe_rt_mpi_finalize(void) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return ok();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
  return ok();
}

extern "C" void moe_rt_mpi_abort(int code) {
  // A liveness probe found silent ranks: the other survivors are finishing
  // the same probe; let them report before the job ends.
  if (double grace = abortGrace(); grace > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(grace));
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) { // a solo process: it is the whole job
    std::fflush(nullptr);
    std::_Exit(code);
  }
  MPI_Abort(MPI_COMM_WORLD, code);
}

extern "C" moe_rt_status
moe_rt_comm_create_world(double timeout_s, int check_shapes, moe_rt_comm *out) {
  if (!out)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_comm_create_world: NULL out");
  *out = nullptr;
  auto checks = std::make_shared<std::atomic<bool>>(check_shapes != 0);
  if (solo) {
    *out = soloComm(timeout_s, std::move(checks));
    return ok();
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return fail(MOE_RT_UNAVAILABLE,
                "moe_rt_comm_create_world: call moe_rt_mpi_init first");
  openWorldLiveness();
  return commFromMpi(MPI_COMM_WORLD, timeout_s, std::move(checks), out);
}

extern "C" moe_rt_status moe_rt_comm_split(moe_rt_comm parent, int color,
                                           moe_rt_comm *out) {
  if (!parent || !out || color < 0)
    return fail(MOE_RT_INVALID_ARGUMENT,
                "moe_rt_comm_split: NULL argument or negative color");
  if (parent->solo) {
    *out = soloComm(parent->timeoutSeconds, parent->checkShapesFlag);
    return ok();
  }
  MPI_Comm split;
  if (int rc = MPI_Comm_split(parent->splits, color, parent->rank, &split);
      rc != MPI_SUCCESS)
    return fail(MOE_RT_BACKEND_ERROR, "MPI_Comm_split: " + mpiError(rc));
  moe_rt_status s =
      commFromMpi(split, parent->timeoutSeconds, parent->checkShapesFlag, out);
  MPI_Comm_free(&split);
  return s;
}

extern "C" moe_rt_status moe_rt_comm_end_shape_checks(moe_rt_comm comm) {
  if (!comm)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_comm_end_shape_checks: NULL");
  comm->checkShapesFlag->store(false);
  return ok();
}

extern "C" int moe_rt_comm_checks_shapes(moe_rt_comm comm) {
  return comm && comm->checkShapes() ? 1 : 0;
}

extern "C" moe_rt_status moe_rt_comm_destroy(moe_rt_comm comm) {
  if (!comm)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_comm_destroy: NULL");
  delete comm;
  return ok();
}

extern "C" int moe_rt_comm_rank(moe_rt_comm comm) {
  return comm ? comm->rank : -1;
}
extern "C" int moe_rt_comm_size(moe_rt_comm comm) {
  return comm ? comm->size : 0;
}
extern "C" double moe_rt_comm_timeout(moe_rt_comm comm) {
  return comm ? comm->timeoutSeconds : 0;
}

extern "C" moe_rt_status moe_rt_comm_node_rank(moe_rt_comm comm,
                                               int *local_rank,
                                               int *local_size) {
  if (!comm || !local_rank || !local_size)
    return fail(MOE_RT_INVALID_ARGUMENT, "moe_rt_comm_node_rank: NULL argument");
  if (comm->solo) {
    *local_rank = 0;
    *local_size = 1;
    return ok();
  }
  MPI_Comm node;
  if (int rc = MPI_Comm_split_type(comm->probe, MPI_COMM_TYPE_SHARED,
                                   comm->rank, MPI_INFO_NULL, &node);
      rc != MPI_SUCCESS)
    return fail(MOE_RT_BACKEND_ERROR, "MPI_Comm_split_type: " + mpiError(rc));
  MPI_Comm_rank(node, local_rank);
  MPI_Comm_size(node, local_size);
  MPI_Comm_free(&node);
  return ok();
}

/// Whether a collective runs with NCCL: a CUDA stream (the tensors are then
