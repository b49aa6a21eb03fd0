//===- CudaDenseOps.cu - the dense ops on a CUDA stream -------------------===//
//
// One CudaExecutor per call (its scratch is freed, stream-ordered, when the
// call returns), then the template of src/device. All numerics live in the
// templates, which the host tests check; this file only binds them to CUDA.
//
//===----------------------------------------------------------------------===//

#include "CudaDenseOps.h"

#include "../device/AttentionOps.h"
#include "../device/DenseOps.h"
#include "CudaExecutor.h"

namespace moe_rt::cuda {

using device::CudaExecutor;

moe_rt_status attention(moe_rt_stream s, const kernels::AttentionShape &shape,
                        const float *x, const float *wq, const float *wk,
                        const float *wv, const float *wo,
                        const float *normScale, const float *normBias,
                        float *out,
                        const kernels::AttentionBias<float> &biases) {
  CudaExecutor ex(s);
  device::attentionForward(ex, shape, x, wq, wk, wv, wo, normScale, normBias,
                           out, device::attn::kMaxScoreElements, biases);
  return ex.status();
}

moe_rt_status attentionGrad(moe_rt_stream s,
                            const kernels::AttentionShape &shape,
                            const float *x, const float *wq, const float *wk,
                            const float *wv, const float *wo,
                            const float *normScale, const float *normBias,
                            const float *dout, float *dx, float *dwq,
                            float *dwk, float *dwv, float *dwo,
                            float *dnormScale, float *dnormBias,
                            const kernels::AttentionBias<float> &biases,
                            const kernels::AttentionBiasGrad<float> &dbiases) {
  CudaExecutor ex(s);
  device::attentionBackward(ex, shape, x, wq, wk, wv, wo, normScale, normBias,
                            dout, dx, dwq, dwk, dwv, dwo, dnormScale,
                            dnormBias, device::attn::kMaxScoreElements, biases,
                            dbiases);
  return ex.status();
}

moe_rt_status norm(moe_rt_stream s, bool rms, int64_t rows, int64_t m,
                   double eps, const float *x, const float *scale,
                   const float *bias, float *out) {
  CudaExecutor ex(s);
  device::normForward(ex, rms, rows, m, x, scale, bias, eps, out);
  return ex.status();
}

moe_rt_status normGrad(moe_rt_stream s, bool rms, int64_t rows, int64_t m,
                       double eps, const float *x, const float *scale,
                       const float *dout, float *dx, float *dscale,
                       float *dbias) {
  CudaExecutor ex(s);
  device::normBackward(ex, rms, rows, m, x, scale, eps, dout, dx, dscale,
                       dbias);
  return ex.status();
}

moe_rt_status linear(moe_rt_stream s, int64_t rows, int64_t k, int64_t n,
                     const float *x, const float *w, const float *bias,
                     float *out) {
  CudaExecutor ex(s);
  device::linearForward(ex, rows, k, n, x, w, bias, out);
  return ex.status();
}

moe_rt_status linearGrad(moe_rt_stream s, int64_t rows, int64_t k, int64_t n,
                         const float *x, const float *w, const float *dout,
                         float *dx, float *dw, float *dbias) {
  CudaExecutor ex(s);
  device::linearBackward(ex, rows, k, n, x, w, dout, dx, dw, dbias);
  return ex.status();
}

moe_rt_status sigmoidGate(moe_rt_stream s, int64_t rows, int64_t m,
                          const float *x, const float *w, const float *y,
                          float *out) {
  CudaExecutor ex(s);
  device::sigmoidGateForward(ex, rows, m, x, w, y, out);
  return ex.status();
}

moe_rt_status sigmoidGateGrad(moe_rt_stream s, int64_t rows, int64_t m,
                              const float *x, const float *w, const float *y,
                              const float *dout, float *dx, float *dw,
                              float *dy) {
  CudaExecutor ex(s);
  device::sigmoidGateBackward(ex, rows, m, x, w, y, dout, dx, dw, dy);
  return ex.status();
}

// The data-error paths return the template's status when it could not get
// an error word (a message is then set), else the executor's.
moe_rt_status embedding(moe_rt_stream s, int64_t tokens, int64_t vocab,
                        int64_t m, const int64_t *ids, const float *table,
                        float *out) {
  CudaExecutor ex(s);
  moe_rt_status st =
      device::embeddingForward(ex, tokens, vocab, m, ids, table, out);
  return ex.status() ? ex.status() : st;
}

moe_rt_status embeddingGrad(moe_rt_stream s, int64_t tokens, int64_t vocab,
                            int64_t m, const int64_t *ids, const float *dout,
                            float *dtable) {
  CudaExecutor ex(s);
  moe_rt_status st =
      device::embeddingBackward(ex, tokens, vocab, m, ids, dout, dtable);
  return ex.status() ? ex.status() : st;
}

moe_rt_status positionEmbedding(moe_rt_stream s, int64_t batch, int64_t seq,
                                int64_t m, const float *x, const float *table,
                                float *out) {
  CudaExecutor ex(s);
  device::positionEmbeddingForward(ex, batch, seq, m, x, table, out);
  return ex.status();
}

moe_rt_status positionEmbeddingGrad(moe_rt_stream s, int64_t batch,
                                    int64_t seq, int64_t rows, int64_t m,
                                    const float *dout, float *dx,
                                    float *dtable) {
  CudaExecutor ex(s);
  device::positionEmbeddingBackward(ex, batch, seq, rows, m, dout, dx, dtable);
  return ex.status();
}

moe_rt_status crossEntropy(moe_rt_stream s, int64_t tokens, int64_t vocab,
                           const float *logits, const int64_t *labels,
                           float *loss) {
  CudaExecutor ex(s);
  moe_rt_status st =
      device::crossEntropyForward(ex, tokens, vocab, logits, labels, loss);
  return ex.status() ? ex.status() : st;
}

moe_rt_status crossEntropyGrad(moe_rt_stream s, int64_t tokens, int64_t vocab,
                               const float *logits, const int64_t *labels,
                               const float *dloss, float *dlogits) {
  CudaExecutor ex(s);
  moe_rt_status st = device::crossEntropyBackward(ex, tokens, vocab, logits,
                                                  labels, dloss, dlogits);
  return ex.status() ? ex.status() : st;
}

moe_rt_status add(moe_rt_stream s, int64_t n, const float *a, const float *b,
                  float *out) {
  CudaExecutor ex(s);
  device::add(ex, n, a, b, out);
  return ex.status();
}

moe_rt_status copy(moe_rt_stream s, const void *src, int64_t srcOffset,
                   void *dst, int64_t dstOffset, int64_t count,
                   size_t elementSize, bool lowPriority) {
  CudaExecutor ex(s, lowPriority);
  device::copyElements(ex, src, srcOffset, dst, dstOffset, count, elementSize);
  return ex.status();
}

moe_rt_status sgd(moe_rt_stream s, int64_t n, const float *param,
                  const float *grad, double lr, float *out) {
  CudaExecutor ex(s);
  device::sgd(ex, n, param, grad, lr, out);
  return ex.status();
}

} // namespace moe_rt::cuda
