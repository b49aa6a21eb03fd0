//===- StepOps.cpp - the step's ops, queued on streams
//----------------------===//
//
// Argument checks, then the CPU kernel as a stream task. Shapes are read
// when the call is made; data when the task runs.
//
//===----------------------------------------------------------------------===//

#include "moe_rt/ops.h"

#include "OpChecks.h"

#include "kernels/Attention.h"
#include "kernels/Expert.h"
#include "kernels/Routing.h"

#if MOE_RT_HAVE_CUDA
#include "../cuda/CudaDenseOps.h"
#include "../cuda/CudaRoutingOps.h"
#endif

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace moe_rt;
namespace k = moe_rt::kernels;

namespace {
k::AttentionShape attentionShape(const moe_rt_attention_attrs *a,
                                 const moe_rt_tensor *x) {
  return {dim(x, 0),    dim(x, 1),   dim(x, 2),      a->heads,
          a->kv_heads,  a->head_dim, a->causal != 0, a->rotary != 0,
          int(a->norm), a->eps};
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

/// A top-k gate's x (... x M) routed by w (M x E) over T tokens.
struct GateShape {
  int64_t m, experts, tokens;
};

/// What moe_rt_gate_topk and its vjp both check: the stream, x, w whose
/// rows are x's last dimension, and k in [1, E].
Check gateChecks(const char *call, moe_rt_stream s, int64_t kk,
                 const moe_rt_tensor *x, const moe_rt_tensor *w, GateShape &g) {
  Check c{call, backendOf(s)};
  c.that(s != nullptr, "NULL stream")
      .tensor(x, "x", MOE_RT_F32, 1)
      .tensor(w, "w", MOE_RT_F32, 2);
  if (c.status)
    return c;
  c.that(dim(w, 0) == dim(x, -1), "w's rows must match x's last dimension");
  if (c.status)
    return c;
  g = {dim(w, 0), dim(w, 1), moe_rt_tensor_numel(x) / dim(w, 0)};
  return c.that(kk >= 1 && kk <= g.experts, "k must be in [1, experts]");
}

/// Experts, slots, M and H of an expert call: 3-D weights are per local
/// expert; 2-D weights (shared experts) make one expert of every token.
struct FfnShape {
  int64_t experts, slots, m, h;
};

Check ffnChecks(const char *call, moe_rt_stream s, const moe_rt_tensor *x,
                const moe_rt_tensor *up, const moe_rt_tensor *gate,
                const moe_rt_tensor *down, FfnShape &shape) {
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

#if MOE_RT_HAVE_CUDA
/// The CUDA gate's description of a softmax_topk gate (moe_rt_gate_topk).
moe_rt::device::GateShape softmaxGateShape(const GateShape &g, int64_t kk,
                                           int normalize) {
  moe_rt::device::GateShape z;
  z.kind = MOE_RT_GATE_SOFTMAX_TOPK;
  z.tokens = g.tokens;
  z.m = g.m;
  z.d = g.m;
  z.experts = g.experts;
  z.k = kk;
  z.normalize = normalize != 0;
  return z;
}

moe_rt::device::ExpertShape deviceShape(const FfnShape &f) {
  moe_rt::device::ExpertShape e;
  e.experts = f.experts;
  e.slots = f.slots;
  e.m = f.m;
  e.h = f.h;
  return e;
}
#endif

} // namespace

extern "C" {

moe_rt_status moe_rt_attention(moe_rt_stream s, const moe_rt_attention_attrs *a,
                               const moe_rt_tensor *x, const moe_rt_tensor *wq,
                               const moe_rt_tensor *wk, const moe_rt_tensor *wv,
                               const moe_rt_tensor *wo,
                               const moe_rt_tensor *scale,
                               const moe_rt_tensor *bias, moe_rt_tensor *out) {
  Check c =
      attentionChecks("moe_rt_attention", s, a, x, wq, wk, wv, wo, scale, bias);
  c.tensor(out, "out", MOE_RT_F32, 3).sizeOf(out, "out", x);
  if (c.status)
    return c.status;
  k::AttentionShape shape = attentionShape(a, x);
  float *px = f32(x), *pq = f32(wq), *pk = f32(wk), *pv = f32(wv),
        *po = f32(wo), *ps = f32(scale), *pb = f32(bias), *pout = f32(out);
  MOE_RT_ON_CUDA(s,
                 cuda::attention(s, shape, px, pq, pk, pv, po, ps, pb, pout));
  return enqueue(s, [=](std::string &) {
    k::attentionForward(shape, px, pq, pk, pv, po, ps, pb, pout);
    return MOE_RT_OK;
  });
}

moe_rt_status moe_rt_attention_grad(
    moe_rt_stream s, const moe_rt_attention_attrs *a, const moe_rt_tensor *x,
    const moe_rt_tensor *wq, const moe_rt_tensor *wk, const moe_rt_tensor *wv,
    const moe_rt_tensor *wo, const moe_rt_tensor *scale,
    const moe_rt_tensor *bias, const moe_rt_tensor *dout, moe_rt_tensor *dx,
    moe_rt_tensor *dwq, moe_rt_tensor *dwk, moe_rt_tensor *dwv,
    moe_rt_tensor *dwo, moe_rt_tensor *dscale, moe_rt_tensor *dbias) {
  Check c = attentionChecks("moe_rt_attention_grad", s, a, x, wq, wk, wv, wo,
                            scale, bias);
  c.tensor(dout, "dout", MOE_RT_F32, 3)
      .tensor(dx, "dx", MOE_RT_F32, 3)
      .tensor(dwq, "dwq", MOE_RT_F32, 2)
      .tensor(dwk, "dwk", MOE_RT_F32, 2)
      .tensor(dwv, "dwv", MOE_RT_F32, 2)
      .tensor(dwo, "dwo", MOE_RT_F32, 2)
      .tensor(dscale, "dnorm_scale", MOE_RT_F32, 1, true)
      .tensor(dbias, "dnorm_bias", MOE_RT_F32, 1, true);
  c.sizeOf(dout, "dout", x)
      .sizeOf(dx, "dx", x)
      .sizeOf(dwq, "dwq", wq)
      .sizeOf(dwk, "dwk", wk)
      .sizeOf(dwv, "dwv", wv)
      .sizeOf(dwo, "dwo", wo)
      .that(!scale == !dscale && !bias == !dbias,
            "dnorm_scale / dnorm_bias go with norm_scale / norm_bias")
      .sizeOf(dscale, "dnorm_scale", scale)
      .sizeOf(dbias, "dnorm_bias", bias);
  if (c.status)
    return c.status;
  k::AttentionShape shape = attentionShape(a, x);
  MOE_RT_ON_CUDA(s, cuda::attentionGrad(
                        s, shape, f32(x), f32(wq), f32(wk), f32(wv), f32(wo),
                        f32(scale), f32(bias), f32(dout), f32(dx), f32(dwq),
                        f32(dwk), f32(dwv), f32(dwo), f32(dscale), f32(dbias)));
  return enqueue(s, [=](std::string &) {
    for (moe_rt_tensor *g : {dx, dwq, dwk, dwv, dwo, dscale, dbias})
      zero(g);
    k::attentionBackward(shape, f32(x), f32(wq), f32(wk), f32(wv), f32(wo),
                         f32(scale), f32(bias), f32(dout), f32(dx), f32(dwq),
                         f32(dwk), f32(dwv), f32(dwo), f32(dscale), f32(dbias));
    return MOE_RT_OK;
  });
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
  return enqueue(s, [=](std::string &) {
    k::normForward(kind == MOE_RT_NORM_RMS, rows, m, f32(x), f32(scale),
                   f32(bias), eps, f32(out));
    return MOE_RT_OK;
  });
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
  return enqueue(s, [=](std::string &) {
    for (moe_rt_tensor *g : {dx, dscale, dbias})
      zero(g);
    k::normBackward(kind == MOE_RT_NORM_RMS, rows, m, f32(x), f32(scale), eps,
                    f32(dout), f32(dx), f32(dscale), f32(dbias));
    return MOE_RT_OK;
  });
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
  return enqueue(s, [=](std::string &) {
    k::linearForward(rows, kk, n, f32(x), f32(w), f32(bias), f32(out));
    return MOE_RT_OK;
  });
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
  return enqueue(s, [=](std::string &) {
    for (moe_rt_tensor *g : {dx, dw, dbias})
      zero(g);
    k::linearBackward(rows, kk, n, f32(x), f32(w), f32(dout), f32(dx), f32(dw),
                      f32(dbias));
    return MOE_RT_OK;
  });
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
  return enqueue(s, [=](std::string &message) {
    if (k::embeddingForward(tokens, vocab, m, i64(ids), f32(table), f32(out)))
      return MOE_RT_OK;
    message = "moe_rt_embedding: a token id is outside [0, " +
              std::to_string(vocab) + ")";
    return MOE_RT_INVALID_ARGUMENT;
  });
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
  return enqueue(s, [=](std::string &message) {
    zero(dtable);
    if (k::embeddingBackward(tokens, vocab, m, i64(ids), f32(dout),
                             f32(dtable)))
      return MOE_RT_OK;
    message = "moe_rt_embedding_grad: a token id is outside the table";
    return MOE_RT_INVALID_ARGUMENT;
  });
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
  return enqueue(s, [=](std::string &message) {
    if (k::crossEntropyForward(tokens, v, f32(logits), i64(labels), f32(loss)))
      return MOE_RT_OK;
    message = "moe_rt_cross_entropy: a label is outside the vocabulary";
    return MOE_RT_INVALID_ARGUMENT;
  });
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
  return enqueue(s, [=](std::string &message) {
    zero(dlogits);
    if (k::crossEntropyBackward(tokens, v, f32(logits), i64(labels),
                                f32(dloss)[0], f32(dlogits)))
      return MOE_RT_OK;
    message = "moe_rt_cross_entropy_grad: a label is outside the vocabulary";
    return MOE_RT_INVALID_ARGUMENT;
  });
}

moe_rt_status moe_rt_gate_topk(moe_rt_stream s, int64_t kk, int normalize,
                               const moe_rt_tensor *x, const moe_rt_tensor *w,
                               moe_rt_tensor *indices, moe_rt_tensor *weights,
                               moe_rt_tensor *counts) {
  GateShape g{};
  Check c = gateChecks("moe_rt_gate_topk", s, kk, x, w, g);
  c.tensor(indices, "indices", MOE_RT_I64)
      .tensor(weights, "weights", MOE_RT_F32)
      .tensor(counts, "counts", MOE_RT_I64);
  int64_t m = g.m, e = g.experts, t = g.tokens;
  c.that(moe_rt_tensor_numel(indices) == t * kk &&
             moe_rt_tensor_numel(weights) == t * kk &&
             moe_rt_tensor_numel(counts) == e,
         "indices and weights need tokens x k entries, counts E");
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::gate(s, softmaxGateShape(g, kk, normalize), f32(x),
                               f32(w), nullptr, i64(indices), f32(weights),
                               i64(counts)));
  return enqueue(s, [=](std::string &) {
    std::vector<float> logits(t * e);
    k::linearForward(t, m, e, f32(x), f32(w), (const float *)nullptr,
                     logits.data());
    k::softmaxTopK(t, e, kk, normalize != 0, logits.data(), i64(indices),
                   f32(weights), i64(counts));
    return MOE_RT_OK;
  });
}

moe_rt_status moe_rt_gate_topk_grad(moe_rt_stream s, int64_t kk, int normalize,
                                    const moe_rt_tensor *x,
                                    const moe_rt_tensor *w,
                                    const moe_rt_tensor *dweights,
                                    moe_rt_tensor *dx, moe_rt_tensor *dw) {
  GateShape g{};
  Check c = gateChecks("moe_rt_gate_topk_grad", s, kk, x, w, g);
  c.tensor(dweights, "dweights", MOE_RT_F32)
      .tensor(dx, "dx", MOE_RT_F32, 1)
      .tensor(dw, "dw", MOE_RT_F32, 2);
  int64_t m = g.m, e = g.experts, t = g.tokens;
  c.size(dweights, "dweights", t * kk).sizeOf(dx, "dx", x).sizeOf(dw, "dw", w);
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::gateGrad(s, softmaxGateShape(g, kk, normalize),
                                   f32(x), f32(w), nullptr, f32(dweights),
                                   f32(dx), f32(dw), nullptr));
  return enqueue(s, [=](std::string &) {
    // The selection is recomputed from x and w, as the forward made it.
    std::vector<float> logits(t * e), dlogits(t * e), weights(t * kk);
    std::vector<int64_t> idx(t * kk), counts(e);
    k::linearForward(t, m, e, f32(x), f32(w), (const float *)nullptr,
                     logits.data());
    k::softmaxTopK(t, e, kk, normalize != 0, logits.data(), idx.data(),
                   weights.data(), counts.data());
    k::softmaxTopKBackward(t, e, kk, normalize != 0, logits.data(), idx.data(),
                           f32(dweights), dlogits.data());
    zero(dx);
    zero(dw);
    k::linearBackward(t, m, e, f32(x), f32(w), dlogits.data(), f32(dx), f32(dw),
                      (float *)nullptr);
    return MOE_RT_OK;
  });
}

moe_rt_status moe_rt_expert(moe_rt_stream s, moe_rt_activation act,
                            const moe_rt_tensor *x, const moe_rt_tensor *up,
                            const moe_rt_tensor *gate,
                            const moe_rt_tensor *down, moe_rt_tensor *out) {
  FfnShape f{};
  Check c = ffnChecks("moe_rt_expert", s, x, up, gate, down, f);
  c.tensor(out, "out", MOE_RT_F32, 1).sizeOf(out, "out", x);
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::expert(s, act, deviceShape(f), f32(x), f32(up),
                                 f32(gate), f32(down), f32(out)));
  return enqueue(s, [=](std::string &) {
    k::expertForward(k::Activation(act), f.experts, f.slots, f.m, f.h, f32(x),
                     f32(up), f32(gate), f32(down), f32(out));
    return MOE_RT_OK;
  });
}

moe_rt_status moe_rt_expert_grad(
    moe_rt_stream s, moe_rt_activation act, const moe_rt_tensor *x,
    const moe_rt_tensor *up, const moe_rt_tensor *gate,
    const moe_rt_tensor *down, const moe_rt_tensor *dout, moe_rt_tensor *dx,
    moe_rt_tensor *dup, moe_rt_tensor *dgate, moe_rt_tensor *ddown) {
  FfnShape f{};
  Check c = ffnChecks("moe_rt_expert_grad", s, x, up, gate, down, f);
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
  if (c.status)
    return c.status;
  MOE_RT_ON_CUDA(s, cuda::expertGrad(s, act, deviceShape(f), f32(x), f32(up),
                                     f32(gate), f32(down), f32(dout), f32(dx),
                                     f32(dup), gate ? f32(dgate) : nullptr,
                                     f32(ddown)));
  return enqueue(s, [=](std::string &) {
    for (moe_rt_tensor *g : {dx, dup, dgate, ddown})
      zero(g);
    k::expertBackward(k::Activation(act), f.experts, f.slots, f.m, f.h, f32(x),
                      f32(up), f32(gate), f32(down), f32(dout), f32(dx),
                      f32(dup), gate ? f32(dgate) : nullptr, f32(ddown));
    return MOE_RT_OK;
  });
}

} // extern "C"
