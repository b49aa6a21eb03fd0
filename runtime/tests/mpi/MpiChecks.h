//===- MpiChecks.h - checks of the MPI test programs ------------*- C++ -*-===//
//
// The MPI tests run under mpirun, one process per rank, without a test
// framework: each check counts, a failure prints which rank and why and
// exits 1, and a rank ends by printing "rank r: N checks passed".
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_TESTS_MPI_MPICHECKS_H
#define MOE_RT_TESTS_MPI_MPICHECKS_H

#include "moe_rt/moe_rt.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace mpi_checks {

inline int rank = 0, size = 1, checks = 0;

inline void expect(bool ok, const std::string &what) {
  if (ok) {
    ++checks;
    return;
  }
  std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  std::exit(1);
}

inline void ok(moe_rt_status s, const char *what) {
  expect(s == MOE_RT_OK, std::string(what) + ": " + moe_rt_status_name(s) +
                             " " + moe_rt_last_error());
}

/// A CPU tensor of `dtype` and `shape`.
inline moe_rt_tensor make(std::vector<int64_t> shape,
                          moe_rt_dtype dtype = MOE_RT_F32) {
  moe_rt_tensor t;
  ok(moe_rt_tensor_create(MOE_RT_CPU, dtype, int(shape.size()), shape.data(),
                          &t),
     "tensor");
  return t;
}

} // namespace mpi_checks

#endif // MOE_RT_TESTS_MPI_MPICHECKS_H
