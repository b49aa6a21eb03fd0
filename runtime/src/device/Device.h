//===- Device.h - what the device kernels are written against ---*- C++ -*-===//
//
// The CUDA backend's ops are written once, as templates over an *executor*,
// so that the same code runs on a GPU (CudaExecutor, src/cuda) and on the
// host (HostExecutor, runtime/tests), where CI checks it against the CPU
// kernels of src/kernels. No GPU is lent to CI: what the host
// run cannot check is only the executor itself (launch configuration,
// cuBLAS argument mapping, stream-ordered memory), which is kept small.
//
// A kernel body is a functor with `MOE_HD void operator()(int64_t i) const`
// that does the work of one index i in [0, n). Bodies of one launch must
// not depend on each other except through atomicAddF / raiseError (the host
// runs them in order, a GPU in any order). Bodies hold raw pointers and
// plain values only (they are copied to the device by value).
//
// Executor concept (`X` in the templates under src/device):
//   template <class Body> moe_rt_status X::forEach(int64_t n, const Body &b);
//       runs b(i) for every i < n, queued on the executor's stream.
//   moe_rt_status X::gemm(const GemmDesc &g);      // see GemmDesc
//   float *X::scratchF32(int64_t n);  int64_t *X::scratchI64(int64_t n);
//       zero-filled workspace valid until the executor is destroyed
//       (stream-ordered on a GPU); nullptr when out of memory (the executor
//       then already holds a failed status: check X::status()).
//   moe_rt_status X::copy(void *dst, const void *src, size_t bytes);
//   moe_rt_status X::zero(void *dst, size_t bytes);
//   int32_t *X::errorWord(); int32_t X::errorCode(const char *message);
//       a data-dependent failure (a token id out of range): a body calls
//       raiseError(word, code); the stream then fails with `message`
//       (CPU kernels fail the stream the same way).
//   moe_rt_status X::status() const;   // first failure so far, else OK
//
// Numerics: bodies accumulate in double where the CPU kernels do, so that
// the host run matches the CPU backend to fp32 rounding.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_DEVICE_DEVICE_H
#define MOE_RT_SRC_DEVICE_DEVICE_H

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define MOE_HD __host__ __device__
#else
#define MOE_HD
#endif

namespace moe_rt::device {

/// *p += v, atomically on a GPU. The host executor runs bodies one at a
/// time, so a plain add is exact there.
MOE_HD inline void atomicAddF(float *p, float v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  *p += v;
#endif
}

MOE_HD inline void atomicAddI64(int64_t *p, int64_t v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(reinterpret_cast<unsigned long long *>(p),
            static_cast<unsigned long long>(v));
#else
  *p += v;
#endif
}

/// Records the first failure code (non-zero) of a launch.
MOE_HD inline void raiseError(int32_t *word, int32_t code) {
#if defined(__CUDA_ARCH__)
  atomicCAS(reinterpret_cast<int *>(word), 0, code);
#else
  if (*word == 0)
    *word = code;
#endif
}

/// A strided batch of row-major GEMMs:
///   C_b = alpha * op(A_b) * op(B_b) + beta * C_b,   b < batch,
/// op(A) m x k, op(B) k x n, C m x n; lda/ldb/ldc are row strides (the
/// number of columns of the stored matrix, or more), stride* the distance
/// between batch members in elements (0 = shared by the batch).
struct GemmDesc {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1, beta = 0;
  const float *a = nullptr;
  int64_t lda = 0, strideA = 0;
  const float *b = nullptr;
  int64_t ldb = 0, strideB = 0;
  float *c = nullptr;
  int64_t ldc = 0, strideC = 0;
  int64_t batch = 1;
};

/// A row-major GEMM with explicit leading dimensions and batch strides.
inline GemmDesc stridedGemm(bool transA, bool transB, int64_t m, int64_t n,
                            int64_t k, float alpha, const float *a,
                            int64_t lda, int64_t strideA, const float *b,
                            int64_t ldb, int64_t strideB, float beta, float *c,
                            int64_t ldc, int64_t strideC, int64_t batch) {
  GemmDesc g;
  g.transA = transA;
  g.transB = transB;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = alpha;
  g.beta = beta;
  g.a = a;
  g.lda = lda;
  g.strideA = strideA;
  g.b = b;
  g.ldb = ldb;
  g.strideB = strideB;
  g.c = c;
  g.ldc = ldc;
  g.strideC = strideC;
  g.batch = batch;
  return g;
}

/// One row-major GEMM with packed operands (row strides = stored columns).
inline GemmDesc gemmDesc(bool transA, bool transB, int64_t m, int64_t n,
                         int64_t k, float alpha, const float *a,
                         const float *b, float beta, float *c) {
  return stridedGemm(transA, transB, m, n, k, alpha, a, transA ? m : k, 0, b,
                     transB ? k : n, 0, beta, c, n, 0, 1);
}

/// cuBLAS is column-major. A row-major C = op(A) op(B) is the column-major
/// C^T = op(B)^T op(A)^T, i.e. the same call with A and B (and m and n)
/// swapped. Kept here, in plain C++, so that the host tests check the
/// mapping against a column-major reference GEMM.
struct ColumnMajorGemm {
  bool transFirst, transSecond; // cublasOperation of the first/second operand
  int64_t m, n, k;
  const float *first;
  int64_t ldFirst, strideFirst;
  const float *second;
  int64_t ldSecond, strideSecond;
  float *c;
  int64_t ldc, strideC;
  int64_t batch;
  float alpha, beta;
};

inline ColumnMajorGemm toColumnMajor(const GemmDesc &g) {
  return {g.transB, g.transA, g.n,        g.m,        g.k,
          g.b,      g.ldb,    g.strideB,  g.a,        g.lda,
          g.strideA, g.c,     g.ldc,      g.strideC,  g.batch,
          g.alpha,  g.beta};
}

/// What cublasGemmStridedBatchedEx requires of its (column-major)
/// arguments, so that a descriptor it would refuse with INVALID_VALUE is
/// caught where it is made: the CUDA executor refuses it with a message, and
/// the host tests (tests/CheckedExecutor.h) fail on it although the host
/// GEMM could run it. Also requires the batch members of C not to overlap.
inline bool cublasAccepts(const ColumnMajorGemm &c) {
  const int64_t intMax = 2147483647;
  auto atLeast = [](int64_t ld, int64_t rows) {
    return ld >= (rows > 1 ? rows : 1);
  };
  return c.m >= 0 && c.n >= 0 && c.k >= 0 && c.batch >= 0 && c.m <= intMax &&
         c.n <= intMax && c.k <= intMax && c.batch <= intMax &&
         atLeast(c.ldFirst, c.transFirst ? c.k : c.m) &&
         atLeast(c.ldSecond, c.transSecond ? c.n : c.k) &&
         atLeast(c.ldc, c.m) &&
         (c.batch <= 1 || c.n == 0 || c.strideC >= c.ldc * (c.n - 1) + c.m);
}

/// A zero-filled double workspace from an executor, which hands out F32
/// and I64 scratch: an I64 buffer has a double one's size and alignment,
/// and all-zero bits are 0.0.
template <class X> double *scratchF64(X &x, int64_t n) {
  return reinterpret_cast<double *>(x.scratchI64(n));
}

} // namespace moe_rt::device

#endif // MOE_RT_SRC_DEVICE_DEVICE_H
