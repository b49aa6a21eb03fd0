//===- CudaDenseOps.h - moe_rt/ops.h dense ops on CUDA ----------*- C++ -*-===//
//
// Entry points the C API (src/api/DenseOps.cpp, RoutingOps.cpp) calls when
// the stream is a CUDA stream, after it has checked the operands: each
// builds a CudaExecutor on `s` and queues the op template of
// src/device/DenseOps.h or AttentionOps.h. Pointers are device pointers
// that must stay alive until the stream has run the work; shapes are the
// checked ones. The return value is the queueing status (a launch or cuBLAS
// failure, out of memory); a data error (a token id or label out of range)
// fails the stream, reported by its synchronize with the CPU op's message.
// Backward calls overwrite their gradient outputs, as the CPU ops do.
//
// Plain host C++ (no CUDA headers), so the C API's .cpp files include it.
// Compiled into the runtime only when the CUDA backend is (MOE_RT_HAVE_CUDA).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CUDA_CUDADENSEOPS_H
#define MOE_RT_SRC_CUDA_CUDADENSEOPS_H

#include "kernels/AttentionShape.h"
#include "moe_rt/moe_rt.h"

#include <cstddef>
#include <cstdint>

namespace moe_rt::cuda {

/// moe_rt_attention: x, out batch x seq x embed; normScale/normBias the
/// pre-norm's (null when absent).
moe_rt_status attention(moe_rt_stream s, const kernels::AttentionShape &shape,
                        const float *x, const float *wq, const float *wk,
                        const float *wv, const float *wo,
                        const float *normScale, const float *normBias,
                        float *out,
                        const kernels::AttentionBias<float> &biases = {});

/// moe_rt_attention_grad: every gradient overwritten; dnormScale /
/// dnormBias may be null (zeroed when given without a pre-norm).
moe_rt_status attentionGrad(moe_rt_stream s,
                            const kernels::AttentionShape &shape,
                            const float *x, const float *wq, const float *wk,
                            const float *wv, const float *wo,
                            const float *normScale, const float *normBias,
                            const float *dout, float *dx, float *dwq,
                            float *dwk, float *dwv, float *dwo,
                            float *dnormScale, float *dnormBias,
                            const kernels::AttentionBias<float> &biases = {},
                            const kernels::AttentionBiasGrad<float> &dbiases =
                                {});

/// moe_rt_norm: rows x m, over the last dimension; rms picks RMSNorm
/// (MOE_RT_NORM_RMS), else LayerNorm; bias may be null.
moe_rt_status norm(moe_rt_stream s, bool rms, int64_t rows, int64_t m,
                   double eps, const float *x, const float *scale,
                   const float *bias, float *out);

/// moe_rt_norm_grad: dx, dscale, dbias (dbias may be null). The forward's
/// bias does not enter the backward, so it is not passed.
moe_rt_status normGrad(moe_rt_stream s, bool rms, int64_t rows, int64_t m,
                       double eps, const float *x, const float *scale,
                       const float *dout, float *dx, float *dscale,
                       float *dbias);

/// moe_rt_linear: out (rows x n) = x (rows x k) w (k x n) + bias (may be
/// null).
moe_rt_status linear(moe_rt_stream s, int64_t rows, int64_t k, int64_t n,
                     const float *x, const float *w, const float *bias,
                     float *out);

/// moe_rt_linear_grad: dx = dout w^T, dw = x^T dout, dbias = column sums
/// of dout (dbias may be null).
moe_rt_status linearGrad(moe_rt_stream s, int64_t rows, int64_t k, int64_t n,
                         const float *x, const float *w, const float *dout,
                         float *dx, float *dw, float *dbias);

/// moe_rt_sigmoid_gate: out = sigmoid(x w) y per row of rows x m.
moe_rt_status sigmoidGate(moe_rt_stream s, int64_t rows, int64_t m,
                          const float *x, const float *w, const float *y,
                          float *out);
/// moe_rt_sigmoid_gate_grad: dx, dw, dy overwritten (each may be null).
moe_rt_status sigmoidGateGrad(moe_rt_stream s, int64_t rows, int64_t m,
                              const float *x, const float *w, const float *y,
                              const float *dout, float *dx, float *dw,
                              float *dy);

/// moe_rt_embedding: out[t] = table[ids[t]], table vocab x m.
moe_rt_status embedding(moe_rt_stream s, int64_t tokens, int64_t vocab,
                        int64_t m, const int64_t *ids, const float *table,
                        float *out);

/// moe_rt_embedding_grad: dtable (vocab x m) = scatter-add of dout by id.
moe_rt_status embeddingGrad(moe_rt_stream s, int64_t tokens, int64_t vocab,
                            int64_t m, const int64_t *ids, const float *dout,
                            float *dtable);

/// moe_rt_position_embedding: out = x + table[position], x batch x seq x m.
moe_rt_status positionEmbedding(moe_rt_stream s, int64_t batch, int64_t seq,
                                int64_t m, const float *x, const float *table,
                                float *out);

/// moe_rt_position_embedding_grad: dx = dout, dtable (rows x m) = sum over
/// the batch of dout, rows past seq zero (either may be null).
moe_rt_status positionEmbeddingGrad(moe_rt_stream s, int64_t batch,
                                    int64_t seq, int64_t rows, int64_t m,
                                    const float *dout, float *dx,
                                    float *dtable);

/// moe_rt_cross_entropy: loss (one float) = mean token cross-entropy of
/// logits (tokens x vocab) against labels.
moe_rt_status crossEntropy(moe_rt_stream s, int64_t tokens, int64_t vocab,
                           const float *logits, const int64_t *labels,
                           float *loss);

/// moe_rt_cross_entropy_grad: dlogits = dloss[0] (softmax - onehot) /
/// tokens; dloss is the device 0-d tensor's data.
moe_rt_status crossEntropyGrad(moe_rt_stream s, int64_t tokens, int64_t vocab,
                               const float *logits, const int64_t *labels,
                               const float *dloss, float *dlogits);

/// moe_rt_add: out = a + b over n elements.
moe_rt_status add(moe_rt_stream s, int64_t n, const float *a, const float *b,
                  float *out);

/// moe_rt_copy: `count` elements of `elementSize` bytes (any dtype) from
/// src + srcOffset to dst + dstOffset (offsets in elements).
/// lowPriority queues it on a communication pool's low-priority stream
/// (moe_rt_all_reduce_into: the copy joins its all-reduce there).
moe_rt_status copy(moe_rt_stream s, const void *src, int64_t srcOffset,
                   void *dst, int64_t dstOffset, int64_t count,
                   size_t elementSize, bool lowPriority = false);

/// moe_rt_sgd: out = param - float(lr) * grad over n elements.
moe_rt_status sgd(moe_rt_stream s, int64_t n, const float *param,
                  const float *grad, double lr, float *out);

} // namespace moe_rt::cuda

#endif // MOE_RT_SRC_CUDA_CUDADENSEOPS_H
