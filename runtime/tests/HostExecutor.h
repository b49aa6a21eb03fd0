//===- HostExecutor.h - the device ops' executor on the host ----*- C++ -*-===//
//
// Runs the CUDA backend's op templates (src/device) on the CPU, body by
// body, so that CI (which has no GPU) checks their logic against the CPU
// kernels. See src/device/Device.h for the executor concept. The gemm is a
// column-major reference called through toColumnMajor, so the mapping the
// CUDA executor hands to cuBLAS is checked too.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_TESTS_HOSTEXECUTOR_H
#define MOE_RT_TESTS_HOSTEXECUTOR_H

#include "../src/Error.h"
#include "../src/device/Device.h"

#include "moe_rt/moe_rt.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace moe_rt::device {

class HostExecutor {
public:
  template <class Body> moe_rt_status forEach(int64_t n, const Body &body) {
    if (failed_)
      return failed_;
    for (int64_t i = 0; i < n; ++i)
      body(i);
    ++launches_;
    return checkWord();
  }

  /// Column-major reference GEMM with cuBLAS's argument convention.
  moe_rt_status gemm(const GemmDesc &g) {
    if (failed_)
      return failed_;
    ColumnMajorGemm c = toColumnMajor(g);
    // Column-major: element (r, col) of a matrix with leading dimension ld
    // is at col * ld + r; op = transpose reads (col, r) instead.
    for (int64_t b = 0; b < c.batch; ++b) {
      const float *x = c.first + b * c.strideFirst;
      const float *y = c.second + b * c.strideSecond;
      float *z = c.c + b * c.strideC;
      for (int64_t col = 0; col < c.n; ++col)
        for (int64_t r = 0; r < c.m; ++r) {
          double acc = 0;
          for (int64_t l = 0; l < c.k; ++l) {
            float xv = c.transFirst ? x[r * c.ldFirst + l] : x[l * c.ldFirst + r];
            float yv =
                c.transSecond ? y[l * c.ldSecond + col] : y[col * c.ldSecond + l];
            acc += double(xv) * yv;
          }
          float &out = z[col * c.ldc + r];
          out = float(c.alpha * acc + (c.beta == 0 ? 0.0 : c.beta * out));
        }
    }
    ++gemms_;
    return MOE_RT_OK;
  }

  float *scratchF32(int64_t n) { return scratch<float>(n); }
  int64_t *scratchI64(int64_t n) { return scratch<int64_t>(n); }

  moe_rt_status copy(void *dst, const void *src, size_t bytes) {
    if (bytes)
      std::memmove(dst, src, bytes);
    return failed_;
  }
  moe_rt_status zero(void *dst, size_t bytes) {
    if (bytes)
      std::memset(dst, 0, bytes);
    return failed_;
  }

  int32_t *errorWord() { return &word_; }
  int32_t errorCode(const char *message) {
    messages_.emplace_back(message);
    return int32_t(messages_.size());
  }
  moe_rt_status status() const { return failed_; }
  const std::string &message() const { return message_; }
  int64_t launches() const { return launches_; }
  int64_t gemms() const { return gemms_; }

private:
  template <typename T> T *scratch(int64_t n) {
    if (n < 0) {
      failed_ = MOE_RT_INVALID_ARGUMENT;
      message_ = "negative scratch size";
      return nullptr;
    }
    buffers_.push_back(std::make_unique<std::vector<char>>(
        size_t(n) * sizeof(T) + 1, char(0)));
    return reinterpret_cast<T *>(buffers_.back()->data());
  }
  moe_rt_status checkWord() {
    if (word_ != 0 && !failed_) {
      failed_ = MOE_RT_BACKEND_ERROR;
      message_ = word_ > 0 && size_t(word_) <= messages_.size()
                     ? messages_[word_ - 1]
                     : "unknown device error " + std::to_string(word_);
      // As a CUDA stream's synchronize reports a raised code.
      moe_rt::fail(failed_, message_);
    }
    return failed_;
  }

  std::vector<std::unique_ptr<std::vector<char>>> buffers_;
  std::vector<std::string> messages_;
  std::string message_;
  int32_t word_ = 0;
  moe_rt_status failed_ = MOE_RT_OK;
  int64_t launches_ = 0, gemms_ = 0;
};

} // namespace moe_rt::device

#endif // MOE_RT_TESTS_HOSTEXECUTOR_H
