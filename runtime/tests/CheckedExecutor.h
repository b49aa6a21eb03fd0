//===- CheckedExecutor.h - host executor, strict about cuBLAS ---*- C++ -*-===//
//
// HostExecutor runs any GEMM descriptor; cuBLAS refuses some (leading
// dimensions too small, sizes over int, overlapping batch members of C).
// The device-op tests run on this executor so that such a descriptor fails
// the test where the op makes it, although the host could run it.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_TESTS_CHECKEDEXECUTOR_H
#define MOE_RT_TESTS_CHECKEDEXECUTOR_H

#include "HostExecutor.h"

#include <gtest/gtest.h>

namespace moe_rt_test {

class CheckedExecutor : public moe_rt::device::HostExecutor {
public:
  moe_rt_status gemm(const moe_rt::device::GemmDesc &g) {
    moe_rt::device::ColumnMajorGemm c = moe_rt::device::toColumnMajor(g);
    if (!moe_rt::device::cublasAccepts(c))
      ADD_FAILURE() << "cuBLAS would refuse: m " << c.m << " n " << c.n
                    << " k " << c.k << " ld " << c.ldFirst << "/"
                    << c.ldSecond << "/" << c.ldc << " trans " << c.transFirst
                    << c.transSecond << " strideC " << c.strideC << " batch "
                    << c.batch;
    return HostExecutor::gemm(g);
  }
};

} // namespace moe_rt_test

#endif // MOE_RT_TESTS_CHECKEDEXECUTOR_H
