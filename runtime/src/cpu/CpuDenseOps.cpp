//===- CpuDenseOps.cpp - dense ops and experts as host tasks --------------===//
//
// Each op is its CPU kernel (src/kernels: Attention.h, Dense.h, Expert.h)
// as one task on the stream; a backward zeroes its gradients first (the
// kernels accumulate).
//
//===----------------------------------------------------------------------===//

#include "CpuOps.h"
#include "CpuTasks.h"
#include "KeptActivations.h"

#include "kernels/Attention.h"
#include "kernels/Dense.h"
#include "kernels/Expert.h"

#include <cstring>
#include <string>

namespace moe_rt::cpu {
namespace k = moe_rt::kernels;

namespace {
/// An attention call's site: its tensors and everything of its shape.
CallSite attentionSite(const k::AttentionShape &a,
                       std::vector<const void *> tensors) {
  return {std::move(tensors),
          {double(a.batch), double(a.seq), double(a.embed), double(a.heads),
           double(a.kvHeads), double(a.headDim), double(a.causal),
           double(a.rotary), double(a.norm), a.eps, a.theta,
           double(a.interleaved), a.clip}};
}
} // namespace

moe_rt_status attention(moe_rt_stream s, const k::AttentionShape &shape,
                        const moe_rt_tensor *x, const moe_rt_tensor *wq,
                        const moe_rt_tensor *wk, const moe_rt_tensor *wv,
                        const moe_rt_tensor *wo, const moe_rt_tensor *scale,
                        const moe_rt_tensor *bias,
                        AttentionBiases<const moe_rt_tensor> biases,
                        moe_rt_tensor *out) {
  float *px = f32(x), *pq = f32(wq), *pk = f32(wk), *pv = f32(wv),
        *po = f32(wo), *ps = f32(scale), *pb = f32(bias), *pout = f32(out);
  k::AttentionBias<float> pbias{f32(biases.q), f32(biases.k), f32(biases.v),
                                f32(biases.o)};
  bool keep = keeping(s);
  CallSite site = attentionSite(shape, {px, pq, pk, pv, po, ps, pb, pbias.q,
                                        pbias.k, pbias.v, pbias.o});
  return task(s, [=] {
    std::shared_ptr<k::AttentionKept<float>> kept =
        keep ? keptAttention().acquire() : nullptr;
    k::attentionForward(shape, px, pq, pk, pv, po, ps, pb, pout, pbias,
                        kept.get());
    if (kept)
      keptAttention().publish(site, std::move(kept));
  });
}

moe_rt_status attentionGrad(
    moe_rt_stream s, const k::AttentionShape &shape, const moe_rt_tensor *x,
    const moe_rt_tensor *wq, const moe_rt_tensor *wk, const moe_rt_tensor *wv,
    const moe_rt_tensor *wo, const moe_rt_tensor *scale,
    const moe_rt_tensor *bias, AttentionBiases<const moe_rt_tensor> biases,
    const moe_rt_tensor *dout, moe_rt_tensor *dx, moe_rt_tensor *dwq,
    moe_rt_tensor *dwk, moe_rt_tensor *dwv, moe_rt_tensor *dwo,
    moe_rt_tensor *dscale, moe_rt_tensor *dbias,
    AttentionBiases<moe_rt_tensor> dbiases) {
  k::AttentionBias<float> pbias{f32(biases.q), f32(biases.k), f32(biases.v),
                                f32(biases.o)};
  bool keep = keeping(s);
  CallSite site =
      attentionSite(shape, {f32(x), f32(wq), f32(wk), f32(wv), f32(wo),
                            f32(scale), f32(bias), pbias.q, pbias.k, pbias.v,
                            pbias.o});
  return task(s, [=] {
    for (moe_rt_tensor *g : {dx, dwq, dwk, dwv, dwo, dscale, dbias, dbiases.q,
                             dbiases.k, dbiases.v, dbiases.o})
      zero(g);
    std::shared_ptr<k::AttentionKept<float>> kept =
        keep ? keptAttention().take(site) : nullptr;
    k::attentionBackward(
        shape, f32(x), f32(wq), f32(wk), f32(wv), f32(wo), f32(scale),
        f32(bias), f32(dout), f32(dx), f32(dwq), f32(dwk), f32(dwv), f32(dwo),
        f32(dscale), f32(dbias), pbias,
        k::AttentionBiasGrad<float>{f32(dbiases.q), f32(dbiases.k),
                                    f32(dbiases.v), f32(dbiases.o)},
        kept.get());
    keptAttention().release(std::move(kept));
  });
}

moe_rt_status norm(moe_rt_stream s, bool rms, int64_t rows, int64_t m,
                   double eps, const moe_rt_tensor *x,
                   const moe_rt_tensor *scale, const moe_rt_tensor *bias,
                   moe_rt_tensor *out) {
  return task(s, [=] {
    k::normForward(rms, rows, m, f32(x), f32(scale), f32(bias), eps,
                   f32(out));
  });
}

moe_rt_status normGrad(moe_rt_stream s, bool rms, int64_t rows, int64_t m,
                       double eps, const moe_rt_tensor *x,
                       const moe_rt_tensor *scale, const moe_rt_tensor *dout,
                       moe_rt_tensor *dx, moe_rt_tensor *dscale,
                       moe_rt_tensor *dbias) {
  return task(s, [=] {
    for (moe_rt_tensor *g : {dx, dscale, dbias})
      zero(g);
    k::normBackward(rms, rows, m, f32(x), f32(scale), eps, f32(dout), f32(dx),
                    f32(dscale), f32(dbias));
  });
}

moe_rt_status linear(moe_rt_stream s, int64_t rows, int64_t kk, int64_t n,
                     const moe_rt_tensor *x, const moe_rt_tensor *w,
                     const moe_rt_tensor *bias, moe_rt_tensor *out) {
  return task(s, [=] {
    k::linearForward(rows, kk, n, f32(x), f32(w), f32(bias), f32(out));
  });
}

moe_rt_status linearGrad(moe_rt_stream s, int64_t rows, int64_t kk, int64_t n,
                         const moe_rt_tensor *x, const moe_rt_tensor *w,
                         const moe_rt_tensor *dout, moe_rt_tensor *dx,
                         moe_rt_tensor *dw, moe_rt_tensor *dbias) {
  return task(s, [=] {
    for (moe_rt_tensor *g : {dx, dw, dbias})
      zero(g);
    k::linearBackward(rows, kk, n, f32(x), f32(w), f32(dout), f32(dx), f32(dw),
                      f32(dbias));
  });
}

moe_rt_status sigmoidGate(moe_rt_stream s, int64_t rows, int64_t m,
                          const moe_rt_tensor *x, const moe_rt_tensor *w,
                          const moe_rt_tensor *y, moe_rt_tensor *out) {
  return task(s, [=] {
    k::sigmoidGateForward(rows, m, f32(x), f32(w), f32(y), f32(out));
  });
}

moe_rt_status sigmoidGateGrad(moe_rt_stream s, int64_t rows, int64_t m,
                              const moe_rt_tensor *x, const moe_rt_tensor *w,
                              const moe_rt_tensor *y,
                              const moe_rt_tensor *dout, moe_rt_tensor *dx,
                              moe_rt_tensor *dw, moe_rt_tensor *dy) {
  return task(s, [=] {
    for (moe_rt_tensor *g : {dx, dw, dy})
      zero(g);
    k::sigmoidGateBackward(rows, m, f32(x), f32(w), f32(y), f32(dout), f32(dx),
                           f32(dw), f32(dy));
  });
}

moe_rt_status embedding(moe_rt_stream s, int64_t tokens, int64_t vocab,
                        int64_t m, const moe_rt_tensor *ids,
                        const moe_rt_tensor *table, moe_rt_tensor *out) {
  return enqueue(s, [=](std::string &message) {
    if (k::embeddingForward(tokens, vocab, m, i64(ids), f32(table), f32(out)))
      return MOE_RT_OK;
    message = "moe_rt_embedding: a token id is outside [0, " +
              std::to_string(vocab) + ")";
    return MOE_RT_INVALID_ARGUMENT;
  });
}

moe_rt_status embeddingGrad(moe_rt_stream s, int64_t tokens, int64_t vocab,
                            int64_t m, const moe_rt_tensor *ids,
                            const moe_rt_tensor *dout, moe_rt_tensor *dtable) {
  return enqueue(s, [=](std::string &message) {
    zero(dtable);
    if (k::embeddingBackward(tokens, vocab, m, i64(ids), f32(dout),
                             f32(dtable)))
      return MOE_RT_OK;
    message = "moe_rt_embedding_grad: a token id is outside the table";
    return MOE_RT_INVALID_ARGUMENT;
  });
}

moe_rt_status positionEmbedding(moe_rt_stream s, int64_t batch, int64_t seq,
                                int64_t m, const moe_rt_tensor *x,
                                const moe_rt_tensor *table,
                                moe_rt_tensor *out) {
  return task(s, [=] {
    k::positionEmbeddingForward(batch, seq, m, f32(x), f32(table), f32(out));
  });
}

moe_rt_status positionEmbeddingGrad(moe_rt_stream s, int64_t batch,
                                    int64_t seq, int64_t m,
                                    const moe_rt_tensor *dout,
                                    moe_rt_tensor *dx, moe_rt_tensor *dtable) {
  return task(s, [=] {
    for (moe_rt_tensor *g : {dx, dtable})
      zero(g);
    k::positionEmbeddingBackward(batch, seq, m, f32(dout), f32(dx),
                                 f32(dtable));
  });
}

moe_rt_status crossEntropy(moe_rt_stream s, int64_t tokens, int64_t v,
                           const moe_rt_tensor *logits,
                           const moe_rt_tensor *labels, moe_rt_tensor *loss) {
  return enqueue(s, [=](std::string &message) {
    if (k::crossEntropyForward(tokens, v, f32(logits), i64(labels), f32(loss)))
      return MOE_RT_OK;
    message = "moe_rt_cross_entropy: a label is outside the vocabulary";
    return MOE_RT_INVALID_ARGUMENT;
  });
}

moe_rt_status crossEntropyGrad(moe_rt_stream s, int64_t tokens, int64_t v,
                               const moe_rt_tensor *logits,
                               const moe_rt_tensor *labels,
                               const moe_rt_tensor *dloss,
                               moe_rt_tensor *dlogits) {
  return enqueue(s, [=](std::string &message) {
    zero(dlogits);
    if (k::crossEntropyBackward(tokens, v, f32(logits), i64(labels),
                                f32(dloss)[0], f32(dlogits)))
      return MOE_RT_OK;
    message = "moe_rt_cross_entropy_grad: a label is outside the vocabulary";
    return MOE_RT_INVALID_ARGUMENT;
  });
}

moe_rt_status expert(moe_rt_stream s, moe_rt_activation act,
                     const ExpertShape &f, const moe_rt_tensor *x,
                     const moe_rt_tensor *up, const moe_rt_tensor *gate,
                     const moe_rt_tensor *down, moe_rt_tensor *out) {
  bool keep = keeping(s);
  CallSite site = expertSite(act, f, f32(x), f32(up), f32(gate), f32(down));
  return task(s, [=] {
    std::shared_ptr<KeptExpert> kept;
    k::ExpertSaved<float> into;
    if (keep) {
      kept = keptExperts().acquire();
      kept->filled.assign(f.experts, f.slots);
      kept->hidden.resize(f.experts * f.slots * f.h);
      kept->gated.resize(gate ? f.experts * f.slots * f.h : 0);
      into = {kept->hidden.data(), gate ? kept->gated.data() : nullptr};
    }
    k::expertForward(k::Activation(act), f.experts, f.slots, f.m, f.h, f32(x),
                     f32(up), f32(gate), f32(down), f32(out), into);
    if (kept)
      keptExperts().publish(site, std::move(kept));
  });
}

moe_rt_status expertGrad(moe_rt_stream s, moe_rt_activation act,
                         const ExpertShape &f, const moe_rt_tensor *x,
                         const moe_rt_tensor *up, const moe_rt_tensor *gate,
                         const moe_rt_tensor *down, const moe_rt_tensor *dout,
                         moe_rt_tensor *dx, moe_rt_tensor *dup,
                         moe_rt_tensor *dgate, moe_rt_tensor *ddown) {
  bool keep = keeping(s);
  CallSite site = expertSite(act, f, f32(x), f32(up), f32(gate), f32(down));
  return task(s, [=] {
    if (f.slots == 0) { // no GEMM would write the weights' gradients
      for (moe_rt_tensor *g : {dx, dup, dgate, ddown})
        zero(g);
      return;
    }
    std::shared_ptr<KeptExpert> kept =
        keep ? keptExperts().take(site) : nullptr;
    k::ExpertSaved<const float> saved;
    if (kept)
      saved = {kept->hidden.data(), gate ? kept->gated.data() : nullptr};
    // Every slot is computed: the first GEMM into each gradient overwrites
    // it (no zero-fill first).
    k::expertBackward(k::Activation(act), f.experts, f.slots, f.m, f.h, f32(x),
                      f32(up), f32(gate), f32(down), f32(dout), f32(dx),
                      f32(dup), gate ? f32(dgate) : nullptr, f32(ddown), saved,
                      /*accumulate=*/false);
    keptExperts().release(std::move(kept));
  });
}

moe_rt_status add(moe_rt_stream s, int64_t n, const moe_rt_tensor *a,
                  const moe_rt_tensor *b, moe_rt_tensor *out) {
  float *pa = f32(a), *pb = f32(b), *po = f32(out);
  return task(s, [=] {
    for (int64_t i = 0; i < n; ++i)
      po[i] = pa[i] + pb[i];
  });
}

moe_rt_status copy(moe_rt_stream s, const moe_rt_tensor *src,
                   int64_t srcOffset, moe_rt_tensor *dst, int64_t dstOffset,
                   int64_t count, bool lowPriority) {
  size_t size = moe_rt_dtype_size(src->dtype);
  const char *from = static_cast<const char *>(src->data) + srcOffset * size;
  char *to = static_cast<char *>(dst->data) + dstOffset * size;
  return enqueue(
      s,
      [=](std::string &) {
        std::memcpy(to, from, count * size);
        return MOE_RT_OK;
      },
      lowPriority);
}

moe_rt_status sgd(moe_rt_stream s, int64_t n, const moe_rt_tensor *param,
                  const moe_rt_tensor *grad, double lr, moe_rt_tensor *out) {
  float *pp = f32(param), *pg = f32(grad), *po = f32(out);
  float step = float(lr);
  return task(s, [=] {
    for (int64_t i = 0; i < n; ++i)
      po[i] = pp[i] - step * pg[i];
  });
}

} // namespace moe_rt::cpu
