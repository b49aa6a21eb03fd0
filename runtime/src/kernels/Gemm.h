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

/// C[m x n] = alpha * op(A) * op(B) + beta * C; op(A) is m x k, op(B) k x n,
/// with explicit leading dimensions (row strides), e.g. one head's columns
/// of a token-major [tokens][heads * D] activation.
inline void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                 float alpha, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float beta, float *c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

inline void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                 double alpha, const double *a, int64_t lda, const double *b,
                 int64_t ldb, double beta, double *c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

/// The same on contiguous operands.
template <typename T>
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, T alpha,
          const T *a, const T *b, T beta, T *c) {
  gemm(transA, transB, m, n, k, alpha, a, transA ? m : k, b, transB ? k : n,
       beta, c, n);
}

} // namespace moe_rt::kernels

#endif // MOE_RT_KERNELS_GEMM_H
