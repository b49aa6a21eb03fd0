//===- CpuOps.h - moe_rt/ops.h's ops on the CPU backend ---------*- C++ -*-===//
//
// What the C API (src/api) calls when an op's stream is a CPU stream,
// after it has checked the operands: each queues the CPU kernels
// (src/kernels) as host tasks on the stream and returns. The counterpart
// of src/cuda's CudaDenseOps.h and CudaRoutingOps.h, with the same checked
// sizes; tensors are host tensors that must stay alive until the stream has
// run the work. Backward calls overwrite their gradient outputs. A data
// error (a token id, label or expert-choice index out of range) fails the
// stream with a message; routing still runs its all-to-alls first, so that
// no peer is left waiting in one.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CPU_CPUOPS_H
#define MOE_RT_SRC_CPU_CPUOPS_H

#include "../OpShapes.h"
#include "kernels/AttentionShape.h"

#include "moe_rt/collectives.h"
#include "moe_rt/ops.h"

#include <cstdint>

namespace moe_rt::cpu {

// Dense ops (CpuDenseOps.cpp).

/// The attention's optional Q, K, V, output biases (or their gradients).
template <class T> struct AttentionBiases {
  T *q, *k, *v, *o;
};
moe_rt_status attention(moe_rt_stream s, const kernels::AttentionShape &shape,
                        const moe_rt_tensor *x, const moe_rt_tensor *wq,
                        const moe_rt_tensor *wk, const moe_rt_tensor *wv,
                        const moe_rt_tensor *wo, const moe_rt_tensor *scale,
                        const moe_rt_tensor *bias,
                        AttentionBiases<const moe_rt_tensor> biases,
                        moe_rt_tensor *out);
moe_rt_status
attentionGrad(moe_rt_stream s, const kernels::AttentionShape &shape,
              const moe_rt_tensor *x, const moe_rt_tensor *wq,
              const moe_rt_tensor *wk, const moe_rt_tensor *wv,
              const moe_rt_tensor *wo, const moe_rt_tensor *scale,
              const moe_rt_tensor *bias,
              AttentionBiases<const moe_rt_tensor> biases,
              const moe_rt_tensor *dout, moe_rt_tensor *dx,
              moe_rt_tensor *dwq, moe_rt_tensor *dwk, moe_rt_tensor *dwv,
              moe_rt_tensor *dwo, moe_rt_tensor *dscale, moe_rt_tensor *dbias,
              AttentionBiases<moe_rt_tensor> dbiases);
/// rows x m over the last dimension; rms picks RMSNorm.
moe_rt_status norm(moe_rt_stream s, bool rms, int64_t rows, int64_t m,
                   double eps, const moe_rt_tensor *x,
                   const moe_rt_tensor *scale, const moe_rt_tensor *bias,
                   moe_rt_tensor *out);
moe_rt_status normGrad(moe_rt_stream s, bool rms, int64_t rows, int64_t m,
                       double eps, const moe_rt_tensor *x,
                       const moe_rt_tensor *scale, const moe_rt_tensor *dout,
                       moe_rt_tensor *dx, moe_rt_tensor *dscale,
                       moe_rt_tensor *dbias);
/// out (rows x n) = x (rows x k) w (k x n) + bias.
moe_rt_status linear(moe_rt_stream s, int64_t rows, int64_t k, int64_t n,
                     const moe_rt_tensor *x, const moe_rt_tensor *w,
                     const moe_rt_tensor *bias, moe_rt_tensor *out);
moe_rt_status linearGrad(moe_rt_stream s, int64_t rows, int64_t k, int64_t n,
                         const moe_rt_tensor *x, const moe_rt_tensor *w,
                         const moe_rt_tensor *dout, moe_rt_tensor *dx,
                         moe_rt_tensor *dw, moe_rt_tensor *dbias);
/// out = sigmoid(x w) y per row of rows x m (moe.sigmoid_gate).
moe_rt_status sigmoidGate(moe_rt_stream s, int64_t rows, int64_t m,
                          const moe_rt_tensor *x, const moe_rt_tensor *w,
                          const moe_rt_tensor *y, moe_rt_tensor *out);
moe_rt_status sigmoidGateGrad(moe_rt_stream s, int64_t rows, int64_t m,
                              const moe_rt_tensor *x, const moe_rt_tensor *w,
                              const moe_rt_tensor *y,
                              const moe_rt_tensor *dout, moe_rt_tensor *dx,
                              moe_rt_tensor *dw, moe_rt_tensor *dy);
moe_rt_status embedding(moe_rt_stream s, int64_t tokens, int64_t vocab,
                        int64_t m, const moe_rt_tensor *ids,
                        const moe_rt_tensor *table, moe_rt_tensor *out);
moe_rt_status embeddingGrad(moe_rt_stream s, int64_t tokens, int64_t vocab,
                            int64_t m, const moe_rt_tensor *ids,
                            const moe_rt_tensor *dout, moe_rt_tensor *dtable);
/// moe_rt_position_embedding(_grad) for x batch x seq x m, a table of
/// `rows` >= seq rows.
moe_rt_status positionEmbedding(moe_rt_stream s, int64_t batch, int64_t seq,
                                int64_t m, const moe_rt_tensor *x,
                                const moe_rt_tensor *table,
                                moe_rt_tensor *out);
moe_rt_status positionEmbeddingGrad(moe_rt_stream s, int64_t batch,
                                    int64_t seq, int64_t m,
                                    const moe_rt_tensor *dout,
                                    moe_rt_tensor *dx, moe_rt_tensor *dtable);
moe_rt_status crossEntropy(moe_rt_stream s, int64_t tokens, int64_t vocab,
                           const moe_rt_tensor *logits,
                           const moe_rt_tensor *labels, moe_rt_tensor *loss);
moe_rt_status crossEntropyGrad(moe_rt_stream s, int64_t tokens, int64_t vocab,
                               const moe_rt_tensor *logits,
                               const moe_rt_tensor *labels,
                               const moe_rt_tensor *dloss,
                               moe_rt_tensor *dlogits);
moe_rt_status expert(moe_rt_stream s, moe_rt_activation act,
                     const ExpertShape &f, const moe_rt_tensor *x,
                     const moe_rt_tensor *up, const moe_rt_tensor *gate,
                     const moe_rt_tensor *down, moe_rt_tensor *out);
moe_rt_status expertGrad(moe_rt_stream s, moe_rt_activation act,
                         const ExpertShape &f, const moe_rt_tensor *x,
                         const moe_rt_tensor *up, const moe_rt_tensor *gate,
                         const moe_rt_tensor *down, const moe_rt_tensor *dout,
                         moe_rt_tensor *dx, moe_rt_tensor *dup,
                         moe_rt_tensor *dgate, moe_rt_tensor *ddown);
/// out = a + b over n F32 elements.
moe_rt_status add(moe_rt_stream s, int64_t n, const moe_rt_tensor *a,
                  const moe_rt_tensor *b, moe_rt_tensor *out);
/// `count` elements (any dtype) from src + srcOffset to dst + dstOffset;
/// lowPriority queues it on a pool's low-priority queue.
moe_rt_status copy(moe_rt_stream s, const moe_rt_tensor *src,
                   int64_t srcOffset, moe_rt_tensor *dst, int64_t dstOffset,
                   int64_t count, bool lowPriority = false);
/// out = param - float(lr) * grad over n elements.
moe_rt_status sgd(moe_rt_stream s, int64_t n, const moe_rt_tensor *param,
                  const moe_rt_tensor *grad, double lr, moe_rt_tensor *out);

// Gates (CpuGateOps.cpp): every kind, softmax_topk included.

moe_rt_status gate(moe_rt_stream s, const GateShape &z,
                   const moe_rt_tensor *x, const moe_rt_tensor *w,
                   const moe_rt_tensor *aux, moe_rt_tensor *indices,
                   moe_rt_tensor *weights, moe_rt_tensor *counts);
moe_rt_status gateGrad(moe_rt_stream s, const GateShape &z,
                       const moe_rt_tensor *x, const moe_rt_tensor *w,
                       const moe_rt_tensor *aux,
                       const moe_rt_tensor *dweights, moe_rt_tensor *dx,
                       moe_rt_tensor *dw, moe_rt_tensor *daux);

// Routing (CpuRoutingOps.cpp): layout tasks around the group's all-to-all.

moe_rt_status dispatch(moe_rt_stream s, moe_rt_comm comm, const RouteShape &r,
                       const moe_rt_tensor *x, const moe_rt_tensor *indices,
                       moe_rt_tensor *out);
moe_rt_status dispatchGrad(moe_rt_stream s, moe_rt_comm comm,
                           const RouteShape &r, const moe_rt_tensor *indices,
                           const moe_rt_tensor *dout, moe_rt_tensor *dx);
moe_rt_status combine(moe_rt_stream s, moe_rt_comm comm, const RouteShape &r,
                      const moe_rt_tensor *expertOut,
                      const moe_rt_tensor *indices,
                      const moe_rt_tensor *weights, moe_rt_tensor *out);
moe_rt_status combineGrad(moe_rt_stream s, moe_rt_comm comm,
                          const RouteShape &r, const moe_rt_tensor *expertOut,
                          const moe_rt_tensor *indices,
                          const moe_rt_tensor *weights,
                          const moe_rt_tensor *dout, moe_rt_tensor *dexpertOut,
                          moe_rt_tensor *dweights);

// Dropless routing (CpuVarRoutingOps.cpp): counts exchange, then
// all-to-all-v of the routed rows; experts over their filled rows only.

moe_rt_status dispatchV(moe_rt_stream s, moe_rt_comm comm,
                        const VarRouteShape &r, const moe_rt_tensor *x,
                        const moe_rt_tensor *indices, moe_rt_tensor *out,
                        moe_rt_tensor *rows);
moe_rt_status dispatchVGrad(moe_rt_stream s, moe_rt_comm comm,
                            const VarRouteShape &r,
                            const moe_rt_tensor *indices,
                            const moe_rt_tensor *dout, moe_rt_tensor *dx);
moe_rt_status combineV(moe_rt_stream s, moe_rt_comm comm,
                       const VarRouteShape &r, const moe_rt_tensor *rows,
                       const moe_rt_tensor *expertOut,
                       const moe_rt_tensor *indices,
                       const moe_rt_tensor *weights, moe_rt_tensor *out);
moe_rt_status combineVGrad(moe_rt_stream s, moe_rt_comm comm,
                           const VarRouteShape &r, const moe_rt_tensor *rows,
                           const moe_rt_tensor *expertOut,
                           const moe_rt_tensor *indices,
                           const moe_rt_tensor *weights,
                           const moe_rt_tensor *dout, moe_rt_tensor *dexpertOut,
                           moe_rt_tensor *dweights);
moe_rt_status exchangeCounts(moe_rt_stream s, moe_rt_comm comm,
                             int64_t experts, int64_t block,
                             const moe_rt_tensor *indices, moe_rt_tensor *out);
/// moe_rt_rows_window's sizes: E_l local experts, G source ranks, rows
/// per expert of the forward chunk's buffer and of out, M per row; forward
/// chunk fromPart of fromParts into chunk part of parts.
using moe_rt::RowsWindowShape; // OpShapes.h
moe_rt_status rowsSum(moe_rt_stream s, int64_t n, const moe_rt_tensor *rows,
                      moe_rt_tensor *total, bool accumulate);
moe_rt_status rowsWindow(moe_rt_stream s, const RowsWindowShape &w,
                         const moe_rt_tensor *total,
                         const moe_rt_tensor *chunkRows,
                         const moe_rt_tensor *chunk, moe_rt_tensor *out);
moe_rt_status rowsPart(moe_rt_stream s, int64_t n, int64_t part, int64_t parts,
                       moe_rt_tensor *rows);
moe_rt_status expertV(moe_rt_stream s, moe_rt_activation act,
                      const ExpertShape &f, const moe_rt_tensor *rows,
                      const moe_rt_tensor *x, const moe_rt_tensor *up,
                      const moe_rt_tensor *gate, const moe_rt_tensor *down,
                      moe_rt_tensor *out);
moe_rt_status expertVGrad(moe_rt_stream s, moe_rt_activation act,
                          const ExpertShape &f, const moe_rt_tensor *rows,
                          const moe_rt_tensor *x, const moe_rt_tensor *up,
                          const moe_rt_tensor *gate, const moe_rt_tensor *down,
                          const moe_rt_tensor *dout, moe_rt_tensor *dx,
                          moe_rt_tensor *dup, moe_rt_tensor *dgate,
                          moe_rt_tensor *ddown);

/// NetMoE's placement in the step (CpuPlacementOps.cpp).
struct PlacementShape {
  int64_t samples = 0, experts = 0, nodes = 1, perNode = 1, block = -1,
          micro = 0;
  bool identity = false, predict = true;
};
/// moe_rt_placement_report's line (the predictions scored since the last
/// call), then resets; "" when none.
const char *placementReport();
moe_rt_status planPlacement(moe_rt_stream s, const PlacementShape &p,
                            const moe_rt_tensor *counts, moe_rt_tensor *out);
moe_rt_status moveSamples(moe_rt_stream s, moe_rt_comm comm,
                          const moe_rt_tensor *place, const moe_rt_tensor *x,
                          moe_rt_tensor *out);
moe_rt_status combineVPlaced(moe_rt_stream s, moe_rt_comm comm,
                             const VarRouteShape &r, int64_t B,
                             const moe_rt_tensor *expertOut,
                             const moe_rt_tensor *indices,
                             const moe_rt_tensor *weights,
                             const moe_rt_tensor *residual,
                             const moe_rt_tensor *place, moe_rt_tensor *out);
moe_rt_status combineVPlacedGrad(
    moe_rt_stream s, moe_rt_comm comm, const VarRouteShape &r, int64_t B,
    const moe_rt_tensor *expertOut, const moe_rt_tensor *indices,
    const moe_rt_tensor *weights, const moe_rt_tensor *place,
    const moe_rt_tensor *dout, moe_rt_tensor *dexpertOut,
    moe_rt_tensor *dweights, moe_rt_tensor *dresidual);

} // namespace moe_rt::cpu

#endif // MOE_RT_SRC_CPU_CPUOPS_H
