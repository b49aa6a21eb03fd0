//===- driver.cpp - run a generated training step ---------------------------===//
//
// A minimal trainer around the C++ that moe_compile_model generates
// (docs/codegen.md): it declares the step, reads the arguments that
// `moe-run --dump-inputs` wrote (so both start from the same parameters and
// tokens), runs N steps and writes the results in moe-run's --dump format,
// which python/compare_dumps.py compares.
//
//   mpirun -np P codegen-driver --inputs PREFIX [--dump PREFIX] [--steps N]
//                               [--timeout SECONDS] [--params FILE]
//                               [--backend cpu|cuda]
//
// --params FILE (the parameter file moe_compile_model writes) replaces the
// parameters of --inputs with the model's initial weights; token ids and
// labels still come from --inputs.
//
// --backend cuda (default cpu) runs the step on one GPU per rank (buffers on
// the device, CUDA streams, NCCL collectives: moe_step_create_on); without a
// CUDA device it stops with "no CUDA device" and exit status 1.
//
// PREFIX.rank<r> is each rank's file. The model's functions are
// <MOE_MODEL>_declare and <MOE_MODEL>_step (moe_compile_model's PREFIX,
// `model` by default).
//
//===----------------------------------------------------------------------===//

#include "moe_rt/step_support.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#ifndef MOE_MODEL
#define MOE_MODEL model
#endif
#define MOE_CAT2(a, b) a##b
#define MOE_CAT(a, b) MOE_CAT2(a, b)

void MOE_CAT(MOE_MODEL, _declare)(moe_step *s);
void MOE_CAT(MOE_MODEL, _step)(moe_step *s);

static int usage(const char *message) {
  std::fprintf(stderr,
               "codegen-driver: error: %s\nusage: mpirun -np P codegen-driver "
               "--inputs PREFIX [--dump PREFIX] [--steps N] [--timeout S] "
               "[--params FILE] [--backend cpu|cuda]\n",
               message);
  moe_rt_mpi_finalize();
  return 2;
}

int main(int argc, char **argv) {
  if (moe_rt_mpi_init(&argc, &argv) != MOE_RT_OK) {
    std::fprintf(stderr, "codegen-driver: error: %s\n", moe_rt_last_error());
    return 2;
  }
  std::string inputs, dump, params;
  int steps = 1;
  double timeout = 60;
  moe_rt_backend backend = MOE_RT_CPU;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc)
      return usage(("'" + a + "' needs a value").c_str());
    std::string v = argv[++i];
    if (a == "--inputs")
      inputs = v;
    else if (a == "--dump")
      dump = v;
    else if (a == "--params") // moe_compile_model's parameter file
      params = v;
    else if (a == "--steps")
      steps = std::atoi(v.c_str());
    else if (a == "--timeout")
      timeout = std::atof(v.c_str());
    else if (a == "--backend") {
      if (v == "cpu")
        backend = MOE_RT_CPU;
      else if (v == "cuda")
        backend = MOE_RT_CUDA;
      else
        return usage(("--backend must be cpu or cuda, not '" + v + "'").c_str());
    }
    else
      return usage(("unknown argument '" + a + "'").c_str());
  }
  if (inputs.empty())
    return usage("--inputs is required (write them with moe-run "
                 "--dump-inputs)");
  if (steps < 1)
    return usage("--steps must be positive");

  // Every rank sees the same answer here (the build, the node's devices),
  // so all stop together with status 1 instead of an MPI abort.
  if (backend == MOE_RT_CUDA &&
      (!moe_rt_cuda_compiled() || moe_rt_cuda_device_count() == 0)) {
    std::fprintf(stderr, "codegen-driver: error: %s\n",
                 moe_rt_cuda_compiled()
                     ? "no CUDA device is available on this machine "
                       "(--backend cuda needs one GPU per rank)"
                     : "no CUDA backend: the runtime was built without CUDA");
    moe_rt_mpi_finalize();
    return 1;
  }
  moe_step *s = moe_step_create_on(timeout, backend);
  std::string rank = ".rank" + std::to_string(moe_step_rank(s));
  MOE_CAT(MOE_MODEL, _declare)(s);
  moe_step_load_inputs(s, (inputs + rank).c_str());
  // Parameters from the build-time file; token ids / labels stay --inputs'.
  if (!params.empty())
    moe_step_load_params(s, params.c_str());
  for (int step = 1; step <= steps; ++step) {
    MOE_CAT(MOE_MODEL, _step)(s);
    double loss = moe_step_global_loss(s);
    if (moe_step_rank(s) == 0)
      std::printf("step %d loss %.6f\n", step, loss);
    std::fflush(stdout);
    if (step < steps)
      moe_step_advance(s);
  }
  if (!dump.empty())
    moe_step_dump_results(s, (dump + rank).c_str());
  moe_step_destroy(s);
  moe_rt_mpi_finalize();
  return 0;
}
