//===- DenseOps.cpp - the dense op calls: checks, then the backend --------===//
//
// Attention, norms, linear, embedding, position embedding, cross-entropy
// and the expert FFN, each with its vjp: argument checks (shapes are read
// when the call is made), then the op goes to its stream's backend (src/cpu/CpuOps.h or
// src/cuda's), which reads the data when the work runs.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/ops.h"

#include "OpChecks.h"

#include "../cpu/CpuOps.h"
#include "kernels/Attention.h"

#if MOE_RT_HAVE_CUDA
#include "../cuda/CudaDenseOps.h"
#include "../cuda/CudaRoutingOps.h"
#include "../cuda/CudaVarRoutingOps.h"
#endif

#include <cmath>
#include <string>

using namespace moe_rt;
namespace k = moe_rt::kernels;

namespace {
k::AttentionShape attentionShape(const moe_rt_attention_attrs *a,
                                 const moe_rt_tensor *x) {
  return {dim(x, 0),    dim(x, 1),   dim(x, 2),      a->heads,
          a->kv_heads,  a->head_dim, a->causal != 0, a->rotary != 0,
          int(a->norm), a->eps,
          a->rotary_theta == 0 ? 10000.0 : a->rotary_theta,
          a->rotary_interleaved != 0, a->clip_qkv};
}

/// The Q, K, V, output biases: F32 vectors of the projections' widths,
/// each optional.
void biasChecks(Check &c, const moe_rt_attention_attrs *a,
                const moe_rt_tensor *x, const moe_rt_tensor *bq,
                const moe_rt_tensor *bk, const moe_rt_tensor *bv,
                const moe_rt_tensor *bo) {
  c.tensor(bq, "bq", MOE_RT_F32, 1, true)
      .tensor(bk, "bk", MOE_RT_F32, 1, true)
      .tensor(bv, "bv", MOE_RT_F32, 1, true)
      .tensor(bo, "bo", MOE_RT_F32, 1, true);
  if (c.status)
    return;
  c.size(bq, "bq", a->heads * a->head_dim)
      .size(bk, "bk", a->kv_heads * a->head_dim)
      .size(bv, "bv", a->kv_heads * a->head_dim)
      .size(bo, "bo", dim(x, 2))
      .that(!a->rotary || (a->head_dim % 2 == 0 && a->rotary_theta >= 0 &&
                           std::isfinite(a->rotary_theta)),
            "rotary needs an even head_dim and a finite theta >= 0 (0: "
            "10000)")
      .that(a->clip_qkv >= 0 && std::isfinite(a->clip_qkv),
            "clip_qkv must be finite and >= 0 (0: no clamp)");
}

Check attentionChecks(const char *call, moe_rt_stream s,
                      const moe_rt_attention_attrs *a, const moe_rt_tensor *x,
                      const moe_rt_tensor *wq, const moe_rt_tensor *wk,
                      const moe_rt_tensor *wv, const moe_rt_tensor *wo,
                      const moe_rt_tensor *scale, const moe_rt_tensor *bias) {
  Check c{call, backendOf(s)};
  c.that(s && a, "NULL stream or attributes")
      .tensor(x, "x", MOE_RT_F32, 3)
      .tensor(wq, "wq", MOE_RT_F32, 2)
      .tensor(wk, "wk", MOE_RT_F32, 2)
      .tensor(wv, "wv", MOE_RT_F32, 2)
      .tensor(wo, "wo", MOE_RT_F32, 2)
      .tensor(scale, "norm_scale", MOE_RT_F32, 1, true)
      .tensor(bias, "norm_bias", MOE_RT_F32, 1, true);
  if (c.status == MOE_RT_OK)
    c.that(a->heads > 0 && a->kv_heads > 0 && a->head_dim > 0 &&
               a->heads % a->kv_heads == 0,
           "heads must be a positive multiple of kv_heads")
        .that(dim(wq, 1) == a->heads * a->head_dim &&
                  dim(wk, 1) == a->kv_heads * a->head_dim &&
                  dim(wo, 0) == a->heads * a->head_dim &&
                  dim(wq, 0) == dim(x, 2),
              "weights do not match the heads and the embedding")
        .that(a->norm == MOE_RT_NORM_NONE || scale,
              "a pre-norm needs its scale")
        .sizeOf(wv, "wv", wk)
        .size(wo, "wo", a->heads * a->head_dim * dim(x, 2))
        .size(scale, "norm_scale", dim(x, 2))
        .size(bias, "norm_bias", dim(x, 2));
  return c;
}

/// What moe_rt_sigmoid_gate and its vjp both check: x, y: T x M, w: M x 1.
Check sigmoidGateChecks(const char *call, moe_rt_stream s,
                        const moe_rt_tensor *x, const moe_rt_tensor *w,
                        const moe_rt_tensor *y) {
  Check c{call, backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .tensor(x, "x", MOE_RT_F32, 1)
      .tensor(w, "w", MOE_RT_F32, 2)
      .tensor(y, "y", MOE_RT_F32, 1);
  if (c.status)
    return c;
  return c.that(dim(w, 0) == dim(x, -1) && dim(w, 1) == 1,
                "w must be M x 1 with M the last dimension of x")
      .sizeOf(y, "y", x);
}

/// What moe_rt_norm and its vjp both check: the stream, x, scale, an
/// optional bias (none for RMS), the kind and eps.
Check normChecks(const char *call, moe_rt_stream s, moe_rt_norm_kind kind,
                 double eps, const moe_rt_tensor *x, const moe_rt_tensor *scale,
                 const moe_rt_tensor *bias) {
  Check c{call, backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .tensor(x, "x", MOE_RT_F32, 1)
      .tensor(scale, "scale", MOE_RT_F32, 1)
      .tensor(bias, "bias", MOE_RT_F32, 1, true);
  if (c.status)
    return c;
  return c
      .that(kind != MOE_RT_NORM_NONE && eps > 0,
            "needs a norm kind and eps > 0")
      .that(kind != MOE_RT_NORM_RMS || !bias, "an RMS norm has no bias")
      .size(scale, "scale", dim(x, -1))
      .size(bias, "bias", dim(x, -1));
}

/// What moe_rt_linear and its vjp both check: the stream, x, and a K x N
/// w whose K is x's last dimension.
Check linearChecks(const char *call, moe_rt_stream s, const moe_rt_tensor *x,
                   const moe_rt_tensor *w) {
  Check c{call, backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .tensor(x, "x", MOE_RT_F32, 1)
      .tensor(w, "w", MOE_RT_F32, 2);
  if (c.status)
    return c;
  return c.that(w->rank == 2 && dim(w, 0) == dim(x, -1),
                "w's rows must match x's last dimension");
}

/// Elements of x W for a linear whose checks passed.
int64_t linearOutSize(const moe_rt_tensor *x, const moe_rt_tensor *w) {
  return moe_rt_tensor_numel(x) / dim(x, -1) * dim(w, 1);
}

/// What moe_rt_embedding and its vjp both check: the stream, I64 ids, a
/// vocab x M table (or its gradient) and the tokens x M activation (out or
/// dout) that goes with it.
Check embeddingChecks(const char *call, moe_rt_stream s,
                      const moe_rt_tensor *ids, const moe_rt_tensor *table,
                      const char *tableName, const moe_rt_tensor *act,
                      const char *actName) {
  Check c{call, backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .tensor(ids, "ids", MOE_RT_I64)
      .tensor(table, tableName, MOE_RT_F32, 2)
      .tensor(act, actName, MOE_RT_F32, 1);
  if (c.status)
    return c;
  return c.size(act, actName, moe_rt_tensor_numel(ids) * dim(table, 1));
}

/// What moe_rt_position_embedding and its vjp both check: the stream, the
/// B x N x M activation `act` (x, or dout) and a P x M table (or its
/// gradient, optional in the vjp) with P >= N positions.
Check positionChecks(const char *call, moe_rt_stream s,
                     const moe_rt_tensor *act, const char *actName,
                     const moe_rt_tensor *table, const char *tableName,
                     bool tableOptional) {
  Check c{call, backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .tensor(act, actName, MOE_RT_F32, 3)
      .tensor(table, tableName, MOE_RT_F32, 2, tableOptional);
  if (c.status)
    return c;
  c.that(act->rank == 3, std::string(actName) + " must be B x N x M");
  if (table)
    c.that(table->rank == 2 && dim(table, 1) == dim(act, 2),
           std::string(tableName) + " must be positions x M")
        .that(dim(table, 0) >= dim(act, 1),
              std::string(tableName) + " has " +
                  std::to_string(dim(table, 0)) +
                  " positions, fewer than the sequence length " +
                  std::to_string(dim(act, 1)));
  return c;
}

/// What moe_rt_cross_entropy and its vjp both check: the stream, logits
/// (tokens x V) and one I64 label per token.
Check crossEntropyChecks(const char *call, moe_rt_stream s,
                         const moe_rt_tensor *logits,
                         const moe_rt_tensor *labels) {
  Check c{call, backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .tensor(logits, "logits", MOE_RT_F32, 2)
      .tensor(labels, "labels", MOE_RT_I64);
  if (c.status)
    return c;
  return c.that(moe_rt_tensor_numel(labels) ==
                    moe_rt_tensor_numel(logits) / dim(logits, -1),
                "one label per token");
}

Check ffnChecks(const char *call, moe_rt_stream s, const moe_rt_tensor *x,
                const moe_rt_tensor *up, const moe_rt_tensor *gate,
                const moe_rt_tensor *down, ExpertShape &shape) {
  Check c{call, backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .tensor(x, "x", MOE_RT_F32, 1)
      .tensor(up, "up", MOE_RT_F32, 2)
      .tensor(gate, "gate", MOE_RT_F32, 2, true)
      .tensor(down, "down", MOE_RT_F32, 2);
  if (c.status)
    return c;
  bool grouped = up->rank == 3;
  c.that(up->rank <= 3 && down->rank == up->rank,
         "up and down must both be 2-D or both 3-D")
      .that(!grouped || x->rank == 3, "3-D weights need an E x S x M input")
      .that(!grouped || (dim(up, 0) == dim(x, 0) && dim(down, 0) == dim(x, 0)),
            "3-D weights need one slice per local expert")
      .sizeOf(gate, "gate", up);
  if (c.status)
    return c;
  shape.m = dim(x, -1);
  shape.h = dim(up, -1);
  shape.experts = grouped ? dim(x, 0) : 1;
  shape.slots = grouped ? dim(x, 1) : moe_rt_tensor_numel(x) / shape.m;
  c.that(dim(up, -2) == shape.m && dim(down, -1) == shape.m &&
             dim(down, -2) == shape.h,
         "weights do not chain: up M x H, down H x M");
  return c;
}


/// The gradient tensors of an expert vjp (moe_rt_expert_grad and
/// moe_rt_expert_v_grad): each the size of its value.
void expertGradChecks(Check &c, const moe_rt_tensor *x,
                      const moe_rt_tensor *up, const moe_rt_tensor *gate,
                      const moe_rt_tensor *down, const moe_rt_tensor *dout,
                      moe_rt_tensor *dx, moe_rt_tensor *dup,
                      moe_rt_tensor *dgate, moe_rt_tensor *ddown) {
  c.tensor(dout, "dout", MOE_RT_F32, 1)
      .tensor(dx, "dx", MOE_RT_F32, 1)
      .tensor(dup, "dup", MOE_RT_F32, 2)
      .tensor(dgate, "dgate", MOE_RT_F32, 2, !gate)
      .tensor(ddown, "ddown", MOE_RT_F32, 2);
  c.sizeOf(dout, "dout", x)
      .sizeOf(dx, "dx", x)
      .sizeOf(dup, "dup", up)
      .sizeOf(dgate, "dgate", gate)
      .sizeOf(ddown, "ddown", down);
}

} // namespace

extern "C" {

moe_rt_status moe_rt_attention(moe_rt_stream s, const moe_rt_attention_attrs *a,
                               const moe_rt_tensor *x, const moe_rt_tensor *wq,
                               const moe_rt_tensor *wk, const moe_rt_tensor *wv,
                               const moe_rt_tensor *wo,
                               const moe_rt_tensor *scale,
                               const moe_rt_tensor *bias, moe_rt_tensor *out) {
  return moe_rt_attention_biased(s, a, x, wq, wk, wv, wo, scale, bias, nullptr,
                                 nullptr, nullptr, nullptr, out);
}

moe_rt_status moe_rt_attention_biased(
    moe_rt_stream s, const moe_rt_attention_attrs *a, const moe_rt_tensor *x,
    const moe_rt_tensor *wq, const moe_rt_tensor *wk, const moe_rt_tensor *wv,
    const moe_rt_tensor *wo, const moe_rt_tensor *scale,
    const moe_rt_tensor *bias, const moe_rt_tensor *bq,
    const moe_rt_tensor *bk, const moe_rt_tensor *bv, const moe_rt_tensor *bo,
    moe_rt_tensor *out) {
  Check c =
      attentionChecks("moe_rt_attention", s, a, x, wq, wk, wv, wo, scale, bias);
  biasChecks(c, a, x, bq, bk, bv, bo);
  c.tensor(out, "out", MOE_RT_F32, 3).sizeOf(out, "out", x);
  if (c.status)
    return c.status;
  k::AttentionShape shape = attentionShape(a, x);
  MOE_RT_ON_CUDA(s, cuda::attention(s, shape, f32(x), f32(wq), f32(wk),
                                    f32(wv), f32(wo), f32(scale), f32(bias),
                                    f32(out),
                                    {f32(bq), f32(bk), f32(bv), f32(bo)}));
  return cpu::attention(s, shape, x, wq, wk, wv, wo, scale, bias,
                        {bq, bk, bv, bo}, out);
}

moe_rt_status moe_rt_attention_grad(
    moe_rt_stream s, const moe_rt_attention_attrs *a, const moe_rt_tensor *x,
    const moe_rt_tensor *wq, const moe_rt_tensor *wk, const moe_rt_tensor *wv,
    const moe_rt_tensor *wo, const moe_rt_tensor *scale,
    const moe_rt_tensor *bias, const moe_rt_tensor *dout, moe_rt_tensor *dx,
    moe_rt_tensor *dwq, moe_rt_tensor *dwk, moe_rt_tensor *dwv,
    moe_rt_tensor *dwo, moe_rt_tensor *dscale, moe_rt_tensor *dbias) {
  return moe_rt_attention_biased_grad(
      s, a, x, wq, wk, wv, wo, scale, bias, nullptr, nullptr, nullptr, nullptr,
      dout, dx, dwq, dwk, dwv, dwo, dscale, dbias, nullptr, nullptr, nullptr,
      nullptr);
}

moe_rt_status moe_rt_attention_biased_grad(
    moe_rt_stream s, const moe_rt_attention_attrs *a, const moe_rt_tensor *x,
    const moe_rt_tensor *wq, const moe_rt_tensor *wk, const moe_rt_tensor *wv,
    const moe_rt_tensor *wo, const moe_rt_tensor *scale,
    const moe_rt_tensor *bias, const moe_rt_tensor *bq,
    const moe_rt_tensor *bk, const moe_rt_tensor *bv, const moe_rt_tensor *bo,
    const moe_rt_tensor *dout, moe_rt_tensor *dx, moe_rt_tensor *dwq,
    moe_rt_tensor *dwk, moe_rt_tensor *dwv, moe_rt_tensor *dwo,
    moe_rt_tensor *dscale, moe_rt_tensor *dbias, moe_rt_tensor *dbq,
    moe_rt_tensor *dbk, moe_rt_tensor *dbv, moe_rt_tensor *dbo) {
  Check c = attentionChecks("moe_rt_attention_grad", s, a, x, wq, wk, wv, wo,
                            scale, bias);
  biasChecks(c, a, x, bq, bk, bv, bo);
  c.tensor(dout, "dout", MOE_RT_F32, 3)
      .tensor(dx, "dx", MOE_RT_F32, 3)
      .tensor(dwq, "dwq", MOE_RT_F32, 2)
      .tensor(dwk, "dwk", MOE_RT_F32, 2)
      .tensor(dwv, "dwv", MOE_RT_F32, 2)
      .tensor(dwo, "dwo", MOE_RT_F32, 2)
      .tensor(dscale, "dnorm_scale", MOE_RT_F32, 1, true)
      .tensor(dbias, "dnorm_bias", MOE_RT_F32, 1, true)
      .tensor(dbq, "dbq", MOE_RT_F32, 1, true)
      .tensor(dbk, "dbk", MOE_RT_F32, 1, true)
      .tensor(dbv, "dbv", MOE_RT_F32, 1, true)
      .tensor(dbo, "dbo", MOE_RT_F32, 1, true);
  c.sizeOf(dout, "dout", x)
      .sizeOf(dx, "dx", x)
      .sizeOf(dwq, "dwq", wq)
      .sizeOf(dwk, "dwk", wk)
      .sizeOf(dwv, "dwv", wv)
      .sizeOf(dwo, "dwo", wo)
      .that(!scale == !dscale && !bias == !dbias,
            "dnorm_scale / dnorm_bias go with norm_scale / norm_bias")
      .that(!bq == !dbq && !bk == !dbk && !bv == !dbv && !bo == !dbo,
            "dbq / dbk / dbv / dbo go with bq / bk / bv / bo")
      .sizeOf(dscale, "dnorm_scale", scale)
      .sizeOf(dbias, "dnorm_bias", bias)
      .sizeOf(dbq, "dbq", bq)
      .sizeOf(dbk, "dbk", bk)
      .sizeOf(dbv, "dbv", bv)
      .sizeOf(dbo, "dbo", bo);
  if (c.status)
    return c.status;
  k::AttentionShape shape = attentionShape(a, x);
  MOE_RT_ON_CUDA(s, cuda::attentionGrad(
                        s, shape, f32(x), f32(wq), f32(wk), f32(wv), f32(wo),
                        f32(scale), f32(bias), f32(dout), f32(dx), f32(dwq),
                        f32(dwk), f32(dwv), f32(dwo), f32(dscale), f32(dbias),
                        {f32(bq), f32(bk), f32(bv), f32(bo)},
                        {f32(dbq), f32(dbk), f32(dbv), f32(dbo)}));
  return cpu::attentionGrad(s, shape, x, wq, wk, wv, wo, scale, bias,
                            {bq, bk, bv, bo}, dout, dx, dwq, dwk, dwv, dwo,
                            dscale, dbias, {dbq, dbk, dbv, dbo});
}

moe_rt_status moe_rt_norm(moe_rt_stream s, moe_rt_norm_kind kind, double eps,
                          const moe_rt_tensor *x, const moe_rt_tensor *scale,
                          const moe_rt_tensor *bias, moe_rt_tensor *out) {
  Check c = normChecks("moe_rt_norm", s, kind, eps, x, scale, bias);
  c.tensor(out, "out", MOE_RT_F32, 1).sizeOf(out, "out", x);
  if (c.status)
    return c.status;
  int64_t m = dim(x, -1), rows = moe_rt_tensor_numel(x) / m;
  MOE_RT_ON_CUDA(s, cuda::norm(s, kind == MOE_RT_NORM_RMS, rows, m, eps, f32(x),
                               f32(scale), f32(bias), f32(out)));
  return cpu::norm(s, kind == MOE_RT_NORM_RMS, rows, m, eps, x, scale, bias,
                   out);
}

moe_rt_status moe_rt_norm_grad(moe_rt_stream s, moe_rt_norm_kind kind,
                               double eps, const moe_rt_tensor *x,
                               const moe_rt_tensor *scale,
                               const moe_rt_tensor *bias,
                               const moe_rt_tensor *dout, moe_rt_tensor *dx,
                               moe_rt_tensor *dscale, moe_rt_tensor *dbias) {
  Check c = normChecks("moe_rt_norm_grad", s, kind, eps, x, scale, bias);
  c.tensor(dout, "dout", MOE_RT_F32, 1)
      .tensor(dx, "dx", MOE_RT_F32, 1)
      .tensor(dscale, "dscale", MOE_RT_F32, 1)
      .tensor(dbias, "dbias", MOE_RT_F32, 1, true);
  if (c.status)
    return c.status;
  c.that(kind != MOE_RT_NORM_RMS || !dbias, "an RMS norm has no bias")
      .sizeOf(dout, "dout", x)
      .sizeOf(dx, "dx", x)
      .sizeOf(dscale, "dscale", scale)
      .size(dbias, "dbias", dim(x, -1));
  if (c.status)
    return c.status;
  int64_t m = dim(x, -1), rows = moe_rt_tensor_numel(x) / m;
  MOE_RT_ON_CUDA(s, cuda::normGrad(s, kind == MOE_RT_NORM_RMS, rows, m, eps,
                                   f32(x), f32(scale), f32(dout), f32(dx),
                                   f32(dscale), f32(dbias)));
  return cpu::normGrad(s, kind == MOE_RT_NORM_RMS, rows, m, eps, x, scale,
                       dout, dx, dscale, dbias);
}

moe_rt_status moe_rt_linear(moe_rt_stream s, const moe_rt_tensor *x,
                            const moe_rt_tensor *w, const moe_rt_tensor *bias,
                            moe_rt_tensor *out) {
  Check c = linearChecks("moe_rt_linear", s, x, w);
  c.tensor(bias, "bias", MOE_RT_F32, 1, true).tensor(out, "out", MOE_RT_F32, 1);
  if (c.status)
    return c.status;
  c.size(bias, "bias", dim(w, 1)).size(out, "out", linearOutSize(x, w));
  if (c.status)
    return c.status;
  int64_t kk = dim(w, 0), n = dim(w, 1), rows = moe_rt_tensor_numel(x) / kk;
  MOE_RT_ON_CUDA(
      s, cuda::linear(s, rows, kk, n, f32(x), f32(w), f32(bias), f32(out)));
  return cpu::linear(s, rows, kk, n, x, w, bias, out);
}

moe_rt_status moe_rt_linear_grad(moe_rt_stream s, const moe_rt_tensor *x,
                                 const moe_rt_tensor *w,
                                 const moe_rt_tensor *dout, moe_rt_tensor *dx,
                                 moe_rt_tensor *dw, moe_rt_tensor *dbias) {
  Check c = linearChecks("moe_rt_linear_grad", s, x, w);
  c.tensor(dout, "dout", MOE_RT_F32, 1)
      .tensor(dx, "dx", MOE_RT_F32, 1)
      .tensor(dw, "dw", MOE_RT_F32, 2)
      .tensor(dbias, "dbias", MOE_RT_F32, 1, true);
  if (c.status)
    return c.status;
  c.size(dout, "dout", linearOutSize(x, w))
      .sizeOf(dx, "dx", x)
      .sizeOf(dw, "dw", w)
      .size(dbias, "dbias", dim(w, 1));
  if (c.status)
    return c.status;
  int64_t kk = dim(w, 0), n = dim(w, 1), rows = moe_rt_tensor_numel(x) / kk;
  MOE_RT_ON_CUDA(s, cuda::linearGrad(s, rows, kk, n, f32(x), f32(w), f32(dout),
                                     f32(dx), f32(dw), f32(dbias)));
  return cpu::linearGrad(s, rows, kk, n, x, w, dout, dx, dw, dbias);
}

moe_rt_status moe_rt_sigmoid_gate(moe_rt_stream s, const moe_rt_tensor *x,
                                  const moe_rt_tensor *w,
                                  const moe_rt_tensor *y, moe_rt_tensor *out) {
  Check c = sigmoidGateChecks("moe_rt_sigmoid_gate", s, x, w, y);
  c.tensor(out, "out", MOE_RT_F32, 1).sizeOf(out, "out", x);
  if (c.status)
    return c.status;
  int64_t m = dim(x, -1), rows = moe_rt_tensor_numel(x) / m;
  MOE_RT_ON_CUDA(s, cuda::sigmoidGate(s, rows, m, f32(x), f32(w), f32(y),
                                      f32(out)));
  return cpu::sigmoidGate(s, rows, m, x, w, y, out);
}

moe_rt_status moe_rt_sigmoid_gate_grad(moe_rt_stream s,
                                       const moe_rt_tensor *x,
                                       const moe_rt_tensor *w,
                                       const moe_rt_tensor *y,
                                       const moe_rt_tensor *dout,
                                       moe_rt_tensor *dx, moe_rt_tensor *dw,
                                       moe_rt_tensor *dy) {
  Check c = sigmoidGateChecks("moe_rt_sigmoid_gate_grad", s, x, w, y);
  c.tensor(dout, "dout", MOE_RT_F32, 1)
      .tensor(dx, "dx", MOE_RT_F32, 1, true)
      .tensor(dw, "dw", MOE_RT_F32, 2, true)
      .tensor(dy, "dy", MOE_RT_F32, 1, true);
  if (c.status)
    return c.status;
  c.sizeOf(dout, "dout", x).sizeOf(dx, "dx", x).sizeOf(dw, "dw", w).sizeOf(
      dy, "dy", y);
  if (c.status)
    return c.status;
  int64_t m = dim(x, -1), rows = moe_rt_tensor_numel(x) / m;
  MOE_RT_ON_CUDA(s, cuda::sigmoidGateGrad(s, rows, m, f32(x), f32(w), f32(y),
                                          f32(dout), f32(dx), f32(dw),
                                          f32(dy)));
  return cpu::sigmoidGateGrad(s, rows, m, x, w, y, dout, dx, dw, dy);
}

moe_rt_status moe_rt_embedding(moe_rt_stream s, const moe_rt_tensor *ids,
                               const moe_rt_tensor *table, moe_rt_tensor *out) {
  Check c =
      embeddingChecks("moe_rt_embedding", s, ids, table, "table", out, "out");
  if (c.status)
    return c.status;
  int64_t tokens = moe_rt_tensor_numel(ids), vocab = dim(table, 0),
          m = dim(table, 1);
  MOE_RT_ON_CUDA(
      s, cuda::embedding(s, tokens, vocab, m, i64(ids), f32(table), f32(out)));
  return cpu::embedding(s, tokens, vocab, m, ids, table, out);
}

moe_rt_status moe_rt_embedding_grad(moe_rt_stream s, const moe_rt_tensor *ids,
                                    const moe_rt_tensor *dout,
                                    moe_rt_tensor *dtable) {
  Check c = embeddingChecks("moe_rt_embedding_grad", s, ids, dtable, "dtable",
                            dout, "dout");
  if (c.status)
    return c.status;
  int64_t tokens = moe_rt_tensor_numel(ids), vocab = dim(dtable, 0),
          m = dim(dtable, 1);
  MOE_RT_ON_CUDA(s, cuda::embeddingGrad(s, tokens, vocab, m, i64(ids),
                                        f32(dout), f32(dtable)));
  return cpu::embeddingGrad(s, tokens, vocab, m, ids, dout, dtable);
}

moe_rt_status moe_rt_position_embedding(moe_rt_stream s,
                                        const moe_rt_tensor *x,
                                        const moe_rt_tensor *table,
                                        moe_rt_tensor *out) {
  Check c = positionChecks("moe_rt_position_embedding", s, x, "x", table,
                           "table", false);
  c.tensor(out, "out", MOE_RT_F32).sizeOf(out, "out", x);
  if (c.status)
    return c.status;
  int64_t b = dim(x, 0), n = dim(x, 1), m = dim(x, 2);
  MOE_RT_ON_CUDA(s, cuda::positionEmbedding(s, b, n, m, f32(x), f32(table),
                                            f32(out)));
  return cpu::positionEmbedding(s, b, n, m, x, table, out);
}

moe_rt_status moe_rt_position_embedding_grad(moe_rt_stream s,
                                             const moe_rt_tensor *dout,
                                             moe_rt_tensor *dx,
                                             moe_rt_tensor *dtable) {
  Check c = positionChecks("moe_rt_position_embedding_grad", s, dout, "dout",
                           dtable, "dtable", true);
  c.tensor(dx, "dx", MOE_RT_F32, 0, true).sizeOf(dx, "dx", dout);
  if (c.status)
    return c.status;
  int64_t b = dim(dout, 0), n = dim(dout, 1), m = dim(dout, 2);
  MOE_RT_ON_CUDA(s, cuda::positionEmbeddingGrad(
                        s, b, n, dtable ? dim(dtable, 0) : 0, m, f32(dout),
                        f32(dx), f32(dtable)));
  return cpu::positionEmbeddingGrad(s, b, n, m, dout, dx, dtable);
}

/// A bias is a position table of one position over rows of one token:
/// the position-embedding kernels with batch = rows, seq = 1.
moe_rt_status moe_rt_bias_add(moe_rt_stream s, const moe_rt_tensor *x,
                              const moe_rt_tensor *bias, moe_rt_tensor *out) {
  Check c{"moe_rt_bias_add", backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .tensor(x, "x", MOE_RT_F32)
      .tensor(bias, "bias", MOE_RT_F32, 1)
      .tensor(out, "out", MOE_RT_F32);
  if (c.status)
    return c.status;
  c.that(x->rank >= 1 && dim(bias, 0) == dim(x, x->rank - 1),
         "bias must have the size of x's last dimension")
      .sizeOf(out, "out", x);
  if (c.status)
    return c.status;
  int64_t m = dim(bias, 0), rows = m ? moe_rt_tensor_numel(x) / m : 0;
  MOE_RT_ON_CUDA(s, cuda::positionEmbedding(s, rows, 1, m, f32(x), f32(bias),
                                            f32(out)));
  return cpu::positionEmbedding(s, rows, 1, m, x, bias, out);
}

moe_rt_status moe_rt_bias_add_grad(moe_rt_stream s, const moe_rt_tensor *dout,
                                   moe_rt_tensor *dx, moe_rt_tensor *dbias) {
  Check c{"moe_rt_bias_add_grad", backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .tensor(dout, "dout", MOE_RT_F32)
      .tensor(dx, "dx", MOE_RT_F32, 0, true)
      .tensor(dbias, "dbias", MOE_RT_F32, 1, true);
  if (c.status)
    return c.status;
  c.that(dout->rank >= 1, "dout must have rank >= 1").sizeOf(dx, "dx", dout);
  if (dbias)
    c.that(dim(dbias, 0) == dim(dout, dout->rank - 1),
           "dbias must have the size of dout's last dimension");
  if (c.status)
    return c.status;
  int64_t m = dim(dout, dout->rank - 1),
          rows = m ? moe_rt_tensor_numel(dout) / m : 0;
  MOE_RT_ON_CUDA(s, cuda::positionEmbeddingGrad(s, rows, 1, dbias ? 1 : 0, m,
                                                f32(dout), f32(dx),
                                                f32(dbias)));
  return cpu::positionEmbeddingGrad(s, rows, 1, m, dout, dx, dbias);
}

moe_rt_status moe_rt_cross_entropy(moe_rt_stream s, const moe_rt_tensor *logits,
                                   const moe_rt_tensor *labels,
                                   moe_rt_tensor *loss) {
  Check c = crossEntropyChecks("moe_rt_cross_entropy", s, logits, labels);
  c.tensor(loss, "loss", MOE_RT_F32).size(loss, "loss", 1);
  if (c.status)
    return c.status;
  int64_t v = dim(logits, -1), tokens = moe_rt_tensor_numel(logits) / v;
  MOE_RT_ON_CUDA(
      s, cuda::crossEntropy(s, tokens, v, f32(logits), i64(labels), f32(loss)));
  return cpu::crossEntropy(s, tokens, v, logits, labels, loss);
}

moe_rt_status moe_rt_cross_entropy_grad(moe_rt_stream s,
                                        const moe_rt_tensor *logits,
                                        const moe_rt_tensor *labels,
                                        const moe_rt_tensor *dloss,
                                        moe_rt_tensor *dlogits) {
  Check c = crossEntropyChecks("moe_rt_cross_entropy_grad", s, logits, labels);
  c.tensor(dloss, "dloss", MOE_RT_F32)
      .tensor(dlogits, "dlogits", MOE_RT_F32, 2)
      .size(dloss, "dloss", 1)
      .sizeOf(dlogits, "dlogits", logits);
  if (c.status)
    return c.status;
  int64_t v = dim(logits, -1), tokens = moe_rt_tensor_numel(logits) / v;
  MOE_RT_ON_CUDA(s,
                 cuda::crossEntropyGrad(s, tokens, v, f32(logits), i64(labels),
                                        f32(dloss), f32(dlogits)));
  return cpu::crossEntropyGrad(s, tokens, v, logits, labels, dloss, dlogits);
}

moe_rt_status moe_rt_expert(moe_rt_stream s, moe_rt_activation act,
                            const moe_rt_tensor *x, const moe_rt_tensor *up,
                            const moe_rt_tensor *gate,
                            const moe_rt_tensor *down, moe_rt_tensor *out) {
  ExpertShape f{};
  Check c = ffnChecks("moe_rt_expert", s, x, up, gate, down, f);
  c.tensor(out, "out", MOE_RT_F32, 1).sizeOf(out, "out", x);
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::expert(s, act, f, f32(x), f32(up),
                                 f32(gate), f32(down), f32(out)));
  return cpu::expert(s, act, f, x, up, gate, down, out);
}

moe_rt_status moe_rt_expert_grad(
    moe_rt_stream s, moe_rt_activation act, const moe_rt_tensor *x,
    const moe_rt_tensor *up, const moe_rt_tensor *gate,
    const moe_rt_tensor *down, const moe_rt_tensor *dout, moe_rt_tensor *dx,
    moe_rt_tensor *dup, moe_rt_tensor *dgate, moe_rt_tensor *ddown) {
  ExpertShape f{};
  Check c = ffnChecks("moe_rt_expert_grad", s, x, up, gate, down, f);
  expertGradChecks(c, x, up, gate, down, dout, dx, dup, dgate, ddown);
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::expertGrad(s, act, f, f32(x), f32(up),
                                     f32(gate), f32(down), f32(dout), f32(dx),
                                     f32(dup), gate ? f32(dgate) : nullptr,
                                     f32(ddown)));
  return cpu::expertGrad(s, act, f, x, up, gate, down, dout, dx, dup, dgate,
                         ddown);
}

/// The expert call's checks, plus `rows` (E_l x G) for its filled rows.
static Check expertVChecks(const char *call, moe_rt_stream s,
                           const moe_rt_tensor *rows, const moe_rt_tensor *x,
                           const moe_rt_tensor *up, const moe_rt_tensor *gate,
                           const moe_rt_tensor *down, ExpertShape &f) {
  Check c = ffnChecks(call, s, x, up, gate, down, f);
  c.tensor(rows, "rows", MOE_RT_I64, 2);
  if (c.status)
    return c;
  c.that(x->rank == 3 && up->rank == 3,
         "x must be E_l x R x M with 3-D weights")
      .that(dim(rows, 0) == f.experts, "rows must be E_l x G");
  return c;
}

moe_rt_status moe_rt_expert_v(moe_rt_stream s, moe_rt_activation act,
                              const moe_rt_tensor *rows,
                              const moe_rt_tensor *x, const moe_rt_tensor *up,
                              const moe_rt_tensor *gate,
                              const moe_rt_tensor *down, moe_rt_tensor *out) {
  ExpertShape f{};
  Check c = expertVChecks("moe_rt_expert_v", s, rows, x, up, gate, down, f);
  c.tensor(out, "out", MOE_RT_F32, 1).sizeOf(out, "out", x);
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::expertV(s, act, f, dim(rows, 1), i64(rows), f32(x),
                                  f32(up), f32(gate), f32(down), f32(out)));
  return cpu::expertV(s, act, f, rows, x, up, gate, down, out);
}

moe_rt_status moe_rt_expert_v_grad(
    moe_rt_stream s, moe_rt_activation act, const moe_rt_tensor *rows,
    const moe_rt_tensor *x, const moe_rt_tensor *up, const moe_rt_tensor *gate,
    const moe_rt_tensor *down, const moe_rt_tensor *dout, moe_rt_tensor *dx,
    moe_rt_tensor *dup, moe_rt_tensor *dgate, moe_rt_tensor *ddown) {
  ExpertShape f{};
  Check c =
      expertVChecks("moe_rt_expert_v_grad", s, rows, x, up, gate, down, f);
  expertGradChecks(c, x, up, gate, down, dout, dx, dup, dgate, ddown);
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s,
                 cuda::expertVGrad(s, act, f, dim(rows, 1), i64(rows), f32(x),
                                   f32(up), f32(gate), f32(down), f32(dout),
                                   f32(dx), f32(dup), f32(dgate), f32(ddown)));
  return cpu::expertVGrad(s, act, f, rows, x, up, gate, down, dout, dx, dup,
                          dgate, ddown);
}

} // extern "C"
