//===- driver.cpp - run a generated training step ---------------------------===//
//
// A minimal trainer around the C++ that moe_compile_model generates
// (docs/codegen.md): it declares the step, reads the arguments that
// `moe-run --dump-inputs` wrote (so both start from the same parameters and
// tokens), runs N steps and writes the results in moe-run's --dump format,
// which python/compare_dumps.py compares.
//
//   mpirun -np P codegen-driver --inputs PREFIX [--dump PREFIX] [--steps N]
//                               [--timeout SECONDS]
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
               "--inputs PREFIX [--dump PREFIX] [--steps N] [--timeout S]\n",
               message);
  moe_rt_mpi_finalize();
  return 2;
}

int main(int argc, char **argv) {
  if (moe_rt_mpi_init(&argc, &argv) != MOE_RT_OK) {
    std::fprintf(stderr, "codegen-driver: error: %s\n", moe_rt_last_error());
    return 2;
  }
  std::string inputs, dump;
  int steps = 1;
  double timeout = 60;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc)
      return usage(("'" + a + "' needs a value").c_str());
    std::string v = argv[++i];
    if (a == "--inputs")
      inputs = v;
    else if (a == "--dump")
      dump = v;
    else if (a == "--steps")
      steps = std::atoi(v.c_str());
    else if (a == "--timeout")
      timeout = std::atof(v.c_str());
    else
      return usage(("unknown argument '" + a + "'").c_str());
  }
  if (inputs.empty())
    return usage("--inputs is required (write them with moe-run "
                 "--dump-inputs)");
  if (steps < 1)
    return usage("--steps must be positive");

  moe_step *s = moe_step_create(timeout);
  std::string rank = ".rank" + std::to_string(moe_step_rank(s));
  MOE_CAT(MOE_MODEL, _declare)(s);
  moe_step_load_inputs(s, (inputs + rank).c_str());
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
