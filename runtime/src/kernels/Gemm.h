//===- Gemm.h - row-major GEMM over OpenBLAS --------------------*- C++ -*-===//
//
// C = alpha * op(A) * op(B) + beta * C with row-major operands, for float
// (the runtime) and double (gradient checks in the tests).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_KERNELS_GEMM_H
#define MOE_RT_KERNELS_GEMM_H

#include <cblas.h>
#include <cstdint>

namespace moe_rt::kernels {

/// C[m x n] = alpha * op(A) * op(B) + beta * C; op(A) is m x k, op(B) k x n.
inline void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                 float alpha, const float *a, const float *b, float beta,
                 float *c) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
              transA ? m : k, b, transB ? k : n, beta, c, n);
}

inline void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                 double alpha, const double *a, const double *b, double beta,
                 double *c) {
  cblas_dgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
              transA ? m : k, b, transB ? k : n, beta, c, n);
}

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_GEMM_H
