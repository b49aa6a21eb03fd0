/*===- ops.h - the step's ops, queued on streams -----------------*- C -*-===*
 *
 * One call per moe dialect op and per backward (vjp) op, as generated code
 * and moe-run issue them: each checks its arguments, then queues the CPU
 * kernel (src/kernels, private) on `stream` and returns. Tensors are F32
 * (routing indices I64) in CPU memory and must stay alive until the stream
 * has run the task. Backward calls overwrite their gradient outputs (as
 * moe.vjp defines them); moe-build-train-step sums a value's contributions
 * with moe_rt_add. Dispatch and combine queue their layout kernels around
 * moe_rt_all_to_all on a communication stream (the priority pool's
 * high-priority queue).
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_OPS_H
#define MOE_RT_OPS_H

#include "moe_rt/collectives.h"
#include "moe_rt/moe_rt.h"
#include "moe_rt/routing_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum moe_rt_norm_kind {
  MOE_RT_NORM_NONE = 0,
  MOE_RT_NORM_LAYER = 1,
  MOE_RT_NORM_RMS = 2
} moe_rt_norm_kind;

typedef enum moe_rt_activation {
  MOE_RT_RELU = 0,
  MOE_RT_GELU = 1,
  MOE_RT_SILU = 2
} moe_rt_activation;

typedef struct moe_rt_attention_attrs {
  int64_t heads, kv_heads, head_dim;
  int causal, rotary;
  moe_rt_norm_kind norm; /* pre-norm */
  double eps;
  /* Rotary base (0: the default 10000) and lane pairing (0: rotate-half,
   * lanes j and j + D/2; 1: interleaved, lanes 2j and 2j + 1). Last, so an
   * initialiser that stops at eps keeps the defaults. */
  double rotary_theta;
  int rotary_interleaved;
  /* Clamp of the Q, K, V projections (bias included, before rotary) to
   * [-clip_qkv, clip_qkv]: DBRX's clip_qkv. 0: no clamp. Its gradient is
   * zero where a projection lies outside the range (torch.clamp's). */
  double clip_qkv;
} moe_rt_attention_attrs;

/* x, out: B x N x M; norm_scale / norm_bias may be NULL. */
moe_rt_status moe_rt_attention(moe_rt_stream s, const moe_rt_attention_attrs *a,
                               const moe_rt_tensor *x, const moe_rt_tensor *wq,
                               const moe_rt_tensor *wk, const moe_rt_tensor *wv,
                               const moe_rt_tensor *wo,
                               const moe_rt_tensor *norm_scale,
                               const moe_rt_tensor *norm_bias,
                               moe_rt_tensor *out);
moe_rt_status
moe_rt_attention_grad(moe_rt_stream s, const moe_rt_attention_attrs *a,
                      const moe_rt_tensor *x, const moe_rt_tensor *wq,
                      const moe_rt_tensor *wk, const moe_rt_tensor *wv,
                      const moe_rt_tensor *wo, const moe_rt_tensor *norm_scale,
                      const moe_rt_tensor *norm_bias, const moe_rt_tensor *dout,
                      moe_rt_tensor *dx, moe_rt_tensor *dwq, moe_rt_tensor *dwk,
                      moe_rt_tensor *dwv, moe_rt_tensor *dwo,
                      moe_rt_tensor *dnorm_scale, moe_rt_tensor *dnorm_bias);

/* moe_rt_attention / _grad with biases on the Q, K, V projections
 * (bq: heads*head_dim, bk, bv: kv_heads*head_dim; added before rotary) and
 * on the output projection (bo: M). Any bias may be NULL (then its gradient
 * must be NULL too); the bias gradients are overwritten like the others. */
moe_rt_status moe_rt_attention_biased(
    moe_rt_stream s, const moe_rt_attention_attrs *a, const moe_rt_tensor *x,
    const moe_rt_tensor *wq, const moe_rt_tensor *wk, const moe_rt_tensor *wv,
    const moe_rt_tensor *wo, const moe_rt_tensor *norm_scale,
    const moe_rt_tensor *norm_bias, const moe_rt_tensor *bq,
    const moe_rt_tensor *bk, const moe_rt_tensor *bv, const moe_rt_tensor *bo,
    moe_rt_tensor *out);
moe_rt_status moe_rt_attention_biased_grad(
    moe_rt_stream s, const moe_rt_attention_attrs *a, const moe_rt_tensor *x,
    const moe_rt_tensor *wq, const moe_rt_tensor *wk, const moe_rt_tensor *wv,
    const moe_rt_tensor *wo, const moe_rt_tensor *norm_scale,
    const moe_rt_tensor *norm_bias, const moe_rt_tensor *bq,
    const moe_rt_tensor *bk, const moe_rt_tensor *bv, const moe_rt_tensor *bo,
    const moe_rt_tensor *dout, moe_rt_tensor *dx, moe_rt_tensor *dwq,
    moe_rt_tensor *dwk, moe_rt_tensor *dwv, moe_rt_tensor *dwo,
    moe_rt_tensor *dnorm_scale, moe_rt_tensor *dnorm_bias, moe_rt_tensor *dbq,
    moe_rt_tensor *dbk, moe_rt_tensor *dbv, moe_rt_tensor *dbo);

/* out[t] = sigmoid(x[t] . w) * y[t] per token t (moe.sigmoid_gate):
 * x, y, out: T x M (any leading shape), w: M x 1. */
moe_rt_status moe_rt_sigmoid_gate(moe_rt_stream s, const moe_rt_tensor *x,
                                  const moe_rt_tensor *w,
                                  const moe_rt_tensor *y, moe_rt_tensor *out);
moe_rt_status moe_rt_sigmoid_gate_grad(moe_rt_stream s,
                                       const moe_rt_tensor *x,
                                       const moe_rt_tensor *w,
                                       const moe_rt_tensor *y,
                                       const moe_rt_tensor *dout,
                                       moe_rt_tensor *dx, moe_rt_tensor *dw,
                                       moe_rt_tensor *dy);

/* Over the last dimension; bias may be NULL (always NULL for RMS). */
moe_rt_status moe_rt_norm(moe_rt_stream s, moe_rt_norm_kind kind, double eps,
                          const moe_rt_tensor *x, const moe_rt_tensor *scale,
                          const moe_rt_tensor *bias, moe_rt_tensor *out);
moe_rt_status moe_rt_norm_grad(moe_rt_stream s, moe_rt_norm_kind kind,
                               double eps, const moe_rt_tensor *x,
                               const moe_rt_tensor *scale,
                               const moe_rt_tensor *bias,
                               const moe_rt_tensor *dout, moe_rt_tensor *dx,
                               moe_rt_tensor *dscale, moe_rt_tensor *dbias);

/* out = x w (+ bias), w: K x N over the last dimension of x. */
moe_rt_status moe_rt_linear(moe_rt_stream s, const moe_rt_tensor *x,
                            const moe_rt_tensor *w, const moe_rt_tensor *bias,
                            moe_rt_tensor *out);
moe_rt_status moe_rt_linear_grad(moe_rt_stream s, const moe_rt_tensor *x,
                                 const moe_rt_tensor *w,
                                 const moe_rt_tensor *dout, moe_rt_tensor *dx,
                                 moe_rt_tensor *dw, moe_rt_tensor *dbias);

/* ids: I64; a bad id fails the stream with a message. */
moe_rt_status moe_rt_embedding(moe_rt_stream s, const moe_rt_tensor *ids,
                               const moe_rt_tensor *table, moe_rt_tensor *out);
moe_rt_status moe_rt_embedding_grad(moe_rt_stream s, const moe_rt_tensor *ids,
                                    const moe_rt_tensor *dout,
                                    moe_rt_tensor *dtable);

/* Learned absolute positions (GPT-2's wpe): out[b, n, :] = x[b, n, :] +
 * table[n, :] for x B x N x M and table P x M, P >= N. The vjp overwrites
 * dx = dout and dtable[n] = sum_b dout[b, n] (rows N.. zero); either may be
 * NULL. */
moe_rt_status moe_rt_position_embedding(moe_rt_stream s,
                                        const moe_rt_tensor *x,
                                        const moe_rt_tensor *table,
                                        moe_rt_tensor *out);
moe_rt_status moe_rt_position_embedding_grad(moe_rt_stream s,
                                             const moe_rt_tensor *dout,
                                             moe_rt_tensor *dx,
                                             moe_rt_tensor *dtable);

/* out = x + bias along the last dimension, bias of that size (M). The vjp
 * overwrites dx = dout and dbias = the sum of dout's rows; either may be
 * NULL. */
moe_rt_status moe_rt_bias_add(moe_rt_stream s, const moe_rt_tensor *x,
                              const moe_rt_tensor *bias, moe_rt_tensor *out);
moe_rt_status moe_rt_bias_add_grad(moe_rt_stream s, const moe_rt_tensor *dout,
                                   moe_rt_tensor *dx, moe_rt_tensor *dbias);

/* Mean token cross-entropy; loss and dloss are 0-d. */
moe_rt_status moe_rt_cross_entropy(moe_rt_stream s, const moe_rt_tensor *logits,
                                   const moe_rt_tensor *labels,
                                   moe_rt_tensor *loss);
moe_rt_status moe_rt_cross_entropy_grad(moe_rt_stream s,
                                        const moe_rt_tensor *logits,
                                        const moe_rt_tensor *labels,
                                        const moe_rt_tensor *dloss,
                                        moe_rt_tensor *dlogits);

/* softmax_topk gate: indices (I64, B x N x k), weights (B x N x k), counts
 * (I64, E). */
moe_rt_status moe_rt_gate_topk(moe_rt_stream s, int64_t k, int normalize,
                               const moe_rt_tensor *x, const moe_rt_tensor *w,
                               moe_rt_tensor *indices, moe_rt_tensor *weights,
                               moe_rt_tensor *counts);
moe_rt_status moe_rt_gate_topk_grad(moe_rt_stream s, int64_t k, int normalize,
                                    const moe_rt_tensor *x,
                                    const moe_rt_tensor *w,
                                    const moe_rt_tensor *dweights,
                                    moe_rt_tensor *dx, moe_rt_tensor *dw);

/* Every moe.gate kind (the values are the dialect's GateKind cases). */
typedef enum moe_rt_gate_kind {
  MOE_RT_GATE_SOFTMAX_TOPK = 0,
  MOE_RT_GATE_NOISY_TOPK = 1,
  MOE_RT_GATE_SIGMOID = 2,
  MOE_RT_GATE_COSINE = 3,
  MOE_RT_GATE_EXPERT_CHOICE = 4
} moe_rt_gate_kind;

/* The base seed of noisy_topk's noise when a caller has no other (moe-run's
 * default --seed, and generated steps' unless moe_step_set_gate_seed). The
 * noise is a pure function of (seed, the token's sample in the step's
 * batch, its position along x's sequence dimension (x's second-to-last),
 * expert) — splitmix64 hashes and Box-Muller, kernels/Gates.h — so forward
 * and backward see the same noise, samples draw different noise, and
 * micro-batching (which splits the batch; each part passes its first
 * sample, moe.gate's sample_offset) never changes it. Runners pass
 * moe_rt_gate_step_seed(base, step) as `seed`, so each training step draws
 * fresh noise (Shazeer et al. 2017) and a run stays reproducible. */
#define MOE_RT_GATE_NOISE_SEED 1
/* cosine's temperature τ when moe.gate has no `tau`: X-MoE's initial 0.07. */
#define MOE_RT_GATE_COSINE_TAU 0.07

/* The noise seed of training step `step` (1, 2, ...) of a run with base
 * seed `base`: mix64(mix64(base) ^ step) (kernels/Gates.h's splitmix64
 * finaliser; python/torch_reference.py repeats it). One value per step,
 * used by both the forward and the backward gate calls of that step. */
uint64_t moe_rt_gate_step_seed(uint64_t base, int64_t step);

/* A gate of any kind on x (... x M, T tokens) and w; aux is the kind's
 * extra operand (NULL for softmax_topk, sigmoid and expert_choice):
 *   softmax_topk  w M x E; softmax over E, keep top k          (= gate_topk)
 *   noisy_topk    w, aux = W_noise M x E; softmax_topk on
 *                 x·w + n ⊙ softplus(x·W_noise), n ~ N(0,1) from `seed`
 *   sigmoid       w M x E; keep the k largest σ(x·w), weight σ itself
 *   cosine        w d x E, aux = W_proj M x d; softmax_topk on
 *                 cos(x·W_proj, w[:, e]) / tau
 *   expert_choice w M x E; S = softmax(x·w) over E per token, then each
 *                 expert e picks the C tokens with the largest S[:, e]
 *                 (ties: lower token id; Zhou et al. 2022,
 *                 kernels/ExpertChoice.h)
 * normalize renormalises the k kept weights to sum 1 (token choice only).
 * Token choice: outputs as moe_rt_gate_topk. expert_choice: indices (I64)
 * and weights are E x C — C, the capacity, is the indices' second
 * dimension, 1 <= C <= T — holding token ids flattened over x's leading
 * dimensions and the chosen S; counts[e] = C; k is not used (checked in
 * [1, E] only). */
moe_rt_status moe_rt_gate(moe_rt_stream s, moe_rt_gate_kind kind, int64_t k,
                          int normalize, uint64_t seed, double tau,
                          const moe_rt_tensor *x, const moe_rt_tensor *w,
                          const moe_rt_tensor *aux, moe_rt_tensor *indices,
                          moe_rt_tensor *weights, moe_rt_tensor *counts);
/* The same for x holding samples first_sample, first_sample + 1, ... of the
 * step's batch (a micro-batch; moe_rt_gate is first_sample = 0): only
 * noisy_topk's noise depends on it. first_sample >= 0. */
moe_rt_status moe_rt_gate_at(moe_rt_stream s, moe_rt_gate_kind kind,
                             int64_t k, int normalize, uint64_t seed,
                             int64_t first_sample, double tau,
                             const moe_rt_tensor *x, const moe_rt_tensor *w,
                             const moe_rt_tensor *aux, moe_rt_tensor *indices,
                             moe_rt_tensor *weights, moe_rt_tensor *counts);
/* Its vjp: dweights -> dx, dw, daux (overwritten; daux NULL iff aux is).
 * The selection and the noise are recomputed from x, as the forward made
 * them. expert_choice: dweights is E x C (its C is the capacity); a token
 * gets the softmax backward of the dweights of every slot that picked it. */
moe_rt_status moe_rt_gate_grad(moe_rt_stream s, moe_rt_gate_kind kind,
                               int64_t k, int normalize, uint64_t seed,
                               double tau, const moe_rt_tensor *x,
                               const moe_rt_tensor *w, const moe_rt_tensor *aux,
                               const moe_rt_tensor *dweights, moe_rt_tensor *dx,
                               moe_rt_tensor *dw, moe_rt_tensor *daux);
moe_rt_status moe_rt_gate_grad_at(
    moe_rt_stream s, moe_rt_gate_kind kind, int64_t k, int normalize,
    uint64_t seed, int64_t first_sample, double tau, const moe_rt_tensor *x,
    const moe_rt_tensor *w, const moe_rt_tensor *aux,
    const moe_rt_tensor *dweights, moe_rt_tensor *dx, moe_rt_tensor *dw,
    moe_rt_tensor *daux);

/* Grouped FFN: x E_l x S x M with 3-D weights, or (shared experts) any
 * x ... x M with 2-D weights; gate may be NULL. */
moe_rt_status moe_rt_expert(moe_rt_stream s, moe_rt_activation act,
                            const moe_rt_tensor *x, const moe_rt_tensor *up,
                            const moe_rt_tensor *gate,
                            const moe_rt_tensor *down, moe_rt_tensor *out);
moe_rt_status moe_rt_expert_grad(
    moe_rt_stream s, moe_rt_activation act, const moe_rt_tensor *x,
    const moe_rt_tensor *up, const moe_rt_tensor *gate,
    const moe_rt_tensor *down, const moe_rt_tensor *dout, moe_rt_tensor *dx,
    moe_rt_tensor *dup, moe_rt_tensor *dgate, moe_rt_tensor *ddown);

/* moe.dispatch / moe.combine with capacity C over the group `comm`:
 * x / out are the rank's tokens (T x M, any leading shape), the expert
 * side E_l x (G C) x M. Token choice: indices (and weights) B x N x k (any
 * shape whose last dimension is k), slots in GShard order, overflow
 * dropped. Expert choice: indices (and weights) exactly E x C (rank 2 and
 * that shape selects it), slot (e, c) holding token indices[e, c] (-1: an
 * empty slot); combine sums weights[e, c] · y[e, c] into the token, 0 for
 * tokens no expert picked. An expert-choice index outside [0, T) fails the
 * stream after the op's all-to-alls (so no rank is left waiting). Both use
 * the same E x C x M send buffer and all-to-all. */
moe_rt_status moe_rt_dispatch(moe_rt_stream s, moe_rt_comm comm,
                              int64_t experts, int64_t capacity,
                              const moe_rt_tensor *x,
                              const moe_rt_tensor *indices, moe_rt_tensor *out);
moe_rt_status moe_rt_dispatch_grad(moe_rt_stream s, moe_rt_comm comm,
                                   int64_t experts, int64_t capacity,
                                   const moe_rt_tensor *indices,
                                   const moe_rt_tensor *dout,
                                   moe_rt_tensor *dx);
moe_rt_status moe_rt_combine(moe_rt_stream s, moe_rt_comm comm, int64_t experts,
                             int64_t capacity, const moe_rt_tensor *expert_out,
                             const moe_rt_tensor *indices,
                             const moe_rt_tensor *weights, moe_rt_tensor *out);
moe_rt_status
moe_rt_combine_grad(moe_rt_stream s, moe_rt_comm comm, int64_t experts,
                    int64_t capacity, const moe_rt_tensor *expert_out,
                    const moe_rt_tensor *indices, const moe_rt_tensor *weights,
                    const moe_rt_tensor *dout, moe_rt_tensor *dexpert_out,
                    moe_rt_tensor *dweights);

/* Token-level pipelining (FSMoE §4, PipeMoE/Tutel): the same four ops
 * moving only the capacity slots [first, first + count) of every expert
 * (0 <= first, first + count <= capacity), so the expert side is
 * E_l x (G count) x M. Slots are routed with the whole capacity, so the
 * windows of a partition of [0, capacity) together move exactly the
 * tokens the whole op moves; combine's result holds the window's
 * contribution (the sum over the windows is the whole combine). Token
 * choice only: expert-choice routing takes count = capacity. */
moe_rt_status moe_rt_dispatch_slots(moe_rt_stream s, moe_rt_comm comm,
                                    int64_t experts, int64_t capacity,
                                    int64_t first, int64_t count,
                                    const moe_rt_tensor *x,
                                    const moe_rt_tensor *indices,
                                    moe_rt_tensor *out);
moe_rt_status moe_rt_dispatch_slots_grad(moe_rt_stream s, moe_rt_comm comm,
                                         int64_t experts, int64_t capacity,
                                         int64_t first, int64_t count,
                                         const moe_rt_tensor *indices,
                                         const moe_rt_tensor *dout,
                                         moe_rt_tensor *dx);
moe_rt_status moe_rt_combine_slots(moe_rt_stream s, moe_rt_comm comm,
                                   int64_t experts, int64_t capacity,
                                   int64_t first, int64_t count,
                                   const moe_rt_tensor *expert_out,
                                   const moe_rt_tensor *indices,
                                   const moe_rt_tensor *weights,
                                   moe_rt_tensor *out);
moe_rt_status moe_rt_combine_slots_grad(
    moe_rt_stream s, moe_rt_comm comm, int64_t experts, int64_t capacity,
    int64_t first, int64_t count, const moe_rt_tensor *expert_out,
    const moe_rt_tensor *indices, const moe_rt_tensor *weights,
    const moe_rt_tensor *dout, moe_rt_tensor *dexpert_out,
    moe_rt_tensor *dweights);
/* Dropless (variable-count) dispatch / combine over the group `comm` (G
 * ranks, this one r), token choice: only routed tokens travel. The expert
 * side is E_l x R x M, R its bound (rows per local expert, out's second
 * dimension); local expert l holds its rows packed from row 0, source
 * ranks in order, then zeros. rows (I64, E_l x G): rows[l][g] = tokens rank
 * g routes to expert r E_l + l. dispatch_v exchanges every rank's counts
 * first (all-gather of E integers), then all-to-all-v's the rows; when any
 * rank's expert would receive more than R rows, every rank moves nothing
 * and fails the stream with the same message, naming `block` (the model
 * block, -1 if unknown), the expert and its load. Its vjp counts again;
 * combine_v and its vjp take `rows`. Tokens in GShard order within an
 * expert, as the padded ops with room for every token.
 * `expert_slots` (I64, G x E_l, or NULL) is the expert placement: slot s of
 * rank g holds logical expert expert_slots[g][s] (NULL: experts g E_l ...
 * in order). It must be a permutation of the experts; the op fails,
 * naming the block and the entry, when it is not. CPU and CUDA streams. */
moe_rt_status moe_rt_dispatch_v(moe_rt_stream s, moe_rt_comm comm,
                                int64_t experts, int64_t block,
                                const moe_rt_tensor *x,
                                const moe_rt_tensor *indices,
                                const moe_rt_tensor *expert_slots,
                                moe_rt_tensor *out, moe_rt_tensor *rows);
moe_rt_status moe_rt_dispatch_v_grad(moe_rt_stream s, moe_rt_comm comm,
                                     int64_t experts, int64_t block,
                                     const moe_rt_tensor *indices,
                                     const moe_rt_tensor *expert_slots,
                                     const moe_rt_tensor *dout,
                                     moe_rt_tensor *dx);
moe_rt_status moe_rt_combine_v(moe_rt_stream s, moe_rt_comm comm,
                               int64_t experts, const moe_rt_tensor *rows,
                               const moe_rt_tensor *expert_out,
                               const moe_rt_tensor *indices,
                               const moe_rt_tensor *expert_slots,
                               const moe_rt_tensor *weights,
                               moe_rt_tensor *out);
moe_rt_status moe_rt_combine_v_grad(
    moe_rt_stream s, moe_rt_comm comm, int64_t experts,
    const moe_rt_tensor *rows, const moe_rt_tensor *expert_out,
    const moe_rt_tensor *indices, const moe_rt_tensor *expert_slots,
    const moe_rt_tensor *weights, const moe_rt_tensor *dout,
    moe_rt_tensor *dexpert_out, moe_rt_tensor *dweights);
/* Token chunks of the variable-count ops (moe-token-pipeline: FSMoE's
 * token-level pipelining on dropless models): the calls above moving only
 * chunk `part` of `parts`. Of the c rows a rank sends one expert (GShard
 * order), chunk part is the run [floor(part c / parts), floor((part + 1) c /
 * parts)); every rank cuts every expert's rows so, and `rows` is the
 * chunk's (dispatch_v_part's result). The chunks of a partition move each
 * routed row once, and their combines sum to the whole combine. CPU and
 * CUDA streams; 0 <= part < parts (given all_counts: CPU streams only). */
/* One counts exchange per layer (moe.exchange_counts): every rank's
 * per-expert counts of its routing `indices` (logical experts, whole rows),
 * all-gathered over the group into `out` (G x E, row g = rank g's). CPU
 * streams only. Given as `all_counts` (else NULL), the two dispatch calls
 * below read their sizes from it instead of all-gathering their own, so the
 * chunks of a layer, forward and vjp, share one exchange; a row of `out`
 * that is not this rank's own counts fails the call, naming the block. */
moe_rt_status moe_rt_exchange_counts(moe_rt_stream s, moe_rt_comm comm,
                                     int64_t experts, int64_t block,
                                     const moe_rt_tensor *indices,
                                     moe_rt_tensor *out);
moe_rt_status moe_rt_dispatch_v_part(moe_rt_stream s, moe_rt_comm comm,
                                     int64_t experts, int64_t block,
                                     int64_t part, int64_t parts,
                                     const moe_rt_tensor *x,
                                     const moe_rt_tensor *indices,
                                     const moe_rt_tensor *expert_slots,
                                     const moe_rt_tensor *all_counts,
                                     moe_rt_tensor *out, moe_rt_tensor *rows);
moe_rt_status moe_rt_dispatch_v_part_grad(
    moe_rt_stream s, moe_rt_comm comm, int64_t experts, int64_t block,
    int64_t part, int64_t parts, const moe_rt_tensor *indices,
    const moe_rt_tensor *expert_slots, const moe_rt_tensor *all_counts,
    const moe_rt_tensor *dout, moe_rt_tensor *dx);
moe_rt_status moe_rt_combine_v_part(
    moe_rt_stream s, moe_rt_comm comm, int64_t experts, int64_t part,
    int64_t parts, const moe_rt_tensor *rows, const moe_rt_tensor *expert_out,
    const moe_rt_tensor *indices, const moe_rt_tensor *expert_slots,
    const moe_rt_tensor *weights, moe_rt_tensor *out);
moe_rt_status moe_rt_combine_v_part_grad(
    moe_rt_stream s, moe_rt_comm comm, int64_t experts, int64_t part,
    int64_t parts, const moe_rt_tensor *rows, const moe_rt_tensor *expert_out,
    const moe_rt_tensor *indices, const moe_rt_tensor *expert_slots,
    const moe_rt_tensor *weights, const moe_rt_tensor *dout,
    moe_rt_tensor *dexpert_out, moe_rt_tensor *dweights);
/* Re-cutting variable-count token chunks (moe.rows_window: the backward's
 * chunk `part` of `parts` from the forward's `from_parts` chunks), three
 * local steps on a CPU or CUDA stream (on CUDA rows_window reads its
 * two tables to the host). rows_sum: total (E_l x G) = rows, or += rows
 * when `accumulate` (summing the forward chunks' rows gives every (local
 * expert, source rank)'s whole count). rows_window: copies from forward
 * chunk `from_part` (its E_l x R x M buffer `chunk` and its rows
 * `chunk_rows`) the rows it shares with chunk `part` of `parts` into out
 * (E_l x R' x M, packed as a dispatch_v_part result); chunk_rows must be
 * chunk from_part of `total` (else the call fails naming the entry).
 * rows_part: total -> chunk `part` of `parts`'s rows, in place. */
moe_rt_status moe_rt_rows_sum(moe_rt_stream s, const moe_rt_tensor *rows,
                              moe_rt_tensor *total, int64_t accumulate);
moe_rt_status moe_rt_rows_window(moe_rt_stream s, int64_t from_part,
                                 int64_t from_parts, int64_t part,
                                 int64_t parts, const moe_rt_tensor *total,
                                 const moe_rt_tensor *chunk_rows,
                                 const moe_rt_tensor *chunk,
                                 moe_rt_tensor *out);
moe_rt_status moe_rt_rows_part(moe_rt_stream s, int64_t part, int64_t parts,
                               moe_rt_tensor *rows);
/* The grouped FFN of moe_rt_expert over the filled rows of x (E_l x R x M)
 * only: expert l's first sum_g rows[l][g] rows (a grouped GEMM over
 * per-expert counts); out's other rows are zero, and so are dx's. */
moe_rt_status moe_rt_expert_v(moe_rt_stream s, moe_rt_activation act,
                              const moe_rt_tensor *rows,
                              const moe_rt_tensor *x, const moe_rt_tensor *up,
                              const moe_rt_tensor *gate,
                              const moe_rt_tensor *down, moe_rt_tensor *out);
moe_rt_status moe_rt_expert_v_grad(
    moe_rt_stream s, moe_rt_activation act, const moe_rt_tensor *rows,
    const moe_rt_tensor *x, const moe_rt_tensor *up, const moe_rt_tensor *gate,
    const moe_rt_tensor *down, const moe_rt_tensor *dout, moe_rt_tensor *dx,
    moe_rt_tensor *dup, moe_rt_tensor *dgate, moe_rt_tensor *ddown);

/* NetMoE's sample placement as a run-time value (docs/netmoe-in-the-step.md).
 * plan_placement: from the group's per-sample counts (I64, S x E, S = G B,
 * moe.routing_counts's rows), NetMoE's two-stage solve (moe_planning; EP's
 * E/G experts per rank in order; grid nodes x per_node) writes each
 * sample's new rank (I64, S), B per rank. mode 0: NetMoE's objective
 * with the next MoE block's dispatch priced on predicted counts (learned
 * from this process's earlier calls, keyed by block and micro-batch:
 * moe_rt/step_predictor.h); 1: identity, every sample stays; 2: the
 * gather only. Every rank of the group calls it in the same order on the
 * same counts and solves the same problem (on a host thread, joined by the
 * first reader of place). placement_report: one line on the predictions
 * scored since its last call ("" when none), then resets.
 * move_samples: whole samples of an integer tensor x (B x ...) to their
 * new ranks: out holds the samples s with place[s] == this rank, in
 * increasing s. combine_v_place: the variable-count combine that sends
 * each expert output row to its sample's new rank place[g B + b] (not
 * back): out (B x N x M) holds this rank's new samples, in increasing s;
 * with `residual` (the dispatch's E_l x R x M rows, NULL for none) every
 * token's first choice carries its row, added unweighted (NetMoE App. A's
 * residual inlining). The vjp reuses the placement; dresidual may be NULL
 * when residual was. */
moe_rt_status moe_rt_plan_placement(moe_rt_stream s, int64_t experts,
                                    int64_t nodes, int64_t per_node,
                                    int64_t block, int64_t micro,
                                    int64_t mode, const moe_rt_tensor *counts,
                                    moe_rt_tensor *place);
const char *moe_rt_placement_report(void);
moe_rt_status moe_rt_move_samples(moe_rt_stream s, moe_rt_comm comm,
                                  const moe_rt_tensor *place,
                                  const moe_rt_tensor *x, moe_rt_tensor *out);
moe_rt_status moe_rt_combine_v_place(
    moe_rt_stream s, moe_rt_comm comm, int64_t experts,
    const moe_rt_tensor *rows, const moe_rt_tensor *expert_out,
    const moe_rt_tensor *indices, const moe_rt_tensor *expert_slots,
    const moe_rt_tensor *weights, const moe_rt_tensor *residual,
    const moe_rt_tensor *place, moe_rt_tensor *out);
moe_rt_status moe_rt_combine_v_place_grad(
    moe_rt_stream s, moe_rt_comm comm, int64_t experts,
    const moe_rt_tensor *rows, const moe_rt_tensor *expert_out,
    const moe_rt_tensor *indices, const moe_rt_tensor *expert_slots,
    const moe_rt_tensor *weights, const moe_rt_tensor *residual,
    const moe_rt_tensor *place, const moe_rt_tensor *dout,
    moe_rt_tensor *dexpert_out, moe_rt_tensor *dweights,
    moe_rt_tensor *dresidual);

/* Elementwise and plumbing. */
moe_rt_status moe_rt_add(moe_rt_stream s, const moe_rt_tensor *a,
                         const moe_rt_tensor *b, moe_rt_tensor *out);
/* Copies `count` elements (any dtype) from src + src_offset to dst +
 * dst_offset: moe.split / moe.merge. */
moe_rt_status moe_rt_copy(moe_rt_stream s, const moe_rt_tensor *src,
                          int64_t src_offset, moe_rt_tensor *dst,
                          int64_t dst_offset, int64_t count);
moe_rt_status moe_rt_sgd(moe_rt_stream s, const moe_rt_tensor *param,
                         const moe_rt_tensor *grad, double lr,
                         moe_rt_tensor *out);
/* out = src with bytes [offset, offset + size) summed over the group (size
 * < 0: all of it): moe.all_reduce, both steps on the pool's low-priority
 * queue. */
moe_rt_status moe_rt_all_reduce_into(moe_rt_stream s, moe_rt_comm comm,
                                     const moe_rt_tensor *src,
                                     moe_rt_tensor *out, int64_t offset_bytes,
                                     int64_t size_bytes);
/* The moe_rt_all_reduce_into calls made on a CPU stream between these two
 * run as one all-reduce of their ranges packed together (one collective
 * start-up for moe.all_reduce of several gradients, as the cost model
 * charges). Every call of a group must use the same comm. On a CUDA
 * stream both are no-ops: each all-reduce is issued as it comes. */
moe_rt_status moe_rt_all_reduce_group_begin(moe_rt_stream s);
moe_rt_status moe_rt_all_reduce_group_end(moe_rt_stream s);

/* shard.all_gather / shard.reduce_scatter along dimension `axis` over the
 * group `comm` (G ranks; FSMoE's expert-sharding collectives,
 * docs/passes/moe-expert-sharding.md). all_gather: out has in's shape with
 * dimension `axis` G times larger, rank g's part at [g d, (g + 1) d) of it.
 * reduce_scatter: out has in's shape with dimension `axis` G times smaller
 * and holds this rank's part of the sum of every rank's in. Queued in the
 * stream's order (a pool's high-priority queue: FIFO, as FSMoE issues its
 * intra-node collectives); each is the other's adjoint. */
moe_rt_status moe_rt_all_gather_axis(moe_rt_stream s, moe_rt_comm comm,
                                     int64_t axis, const moe_rt_tensor *in,
                                     moe_rt_tensor *out);
moe_rt_status moe_rt_reduce_scatter_axis(moe_rt_stream s, moe_rt_comm comm,
                                         int64_t axis, const moe_rt_tensor *in,
                                         moe_rt_tensor *out);

/* moe.gather_rows / moe.scatter_rows (expert sharding on the variable-count
 * path; docs/passes/moe-expert-sharding.md) over the group `comm` (a node's
 * S ranks, this one s). Expert sides are E_l x R x M, local expert l's rows
 * packed from row 0, then zeros. gather_rows: exchanges every rank's rows
 * (I64, E_l x G), then all-gathers each expert's filled rows
 * (MPI_Iallgatherv): out holds rank 0's run, then rank 1's, ...;
 * gathered_rows (E_l x S G) the ranks' rows side by side. When a local
 * expert's node total is over R every rank moves nothing and fails with the
 * same message naming the call, `block` (-1 if unknown) and the load.
 * gather_rows_grad (its vjp): the reduce-scatter-v of dout (gathered
 * layout; counts exchanged again) into dx (this rank's run).
 * scatter_rows: the reduce-scatter-v (MPI_Ireduce_scatter with per-rank
 * counts) of `in` (gathered layout) by gathered_rows; scatter_rows_grad:
 * the all-gather-v of dout. Both exchange the ranks' own block of
 * gathered_rows and fail (naming the entry) when the operand disagrees
 * with the group's. CPU streams only. */
moe_rt_status moe_rt_gather_rows(moe_rt_stream s, moe_rt_comm comm,
                                 int64_t block, const moe_rt_tensor *in,
                                 const moe_rt_tensor *rows, moe_rt_tensor *out,
                                 moe_rt_tensor *gathered_rows);
moe_rt_status moe_rt_gather_rows_grad(moe_rt_stream s, moe_rt_comm comm,
                                      int64_t block, const moe_rt_tensor *rows,
                                      const moe_rt_tensor *dout,
                                      moe_rt_tensor *dx);
moe_rt_status moe_rt_scatter_rows(moe_rt_stream s, moe_rt_comm comm,
                                  int64_t block,
                                  const moe_rt_tensor *gathered_rows,
                                  const moe_rt_tensor *in, moe_rt_tensor *out);
moe_rt_status moe_rt_scatter_rows_grad(moe_rt_stream s, moe_rt_comm comm,
                                       int64_t block,
                                       const moe_rt_tensor *gathered_rows,
                                       const moe_rt_tensor *dout,
                                       moe_rt_tensor *dx);

/* Optimizers (docs/optimizers.md). lr: an F32 scalar tensor (the step's
 * "lr" input), step: an I64 scalar (the 1-based update count), scale: the
 * F32 scalar clip coefficient of moe_rt_clip_coef, or NULL for none; all
 * read when the task runs. Every other tensor has the parameter's size.
 * moe.adamw: torch.optim.AdamW; moe.sgd_momentum: torch.optim.SGD with
 * momentum (dampening 0). */
moe_rt_status moe_rt_adamw(moe_rt_stream s, double beta1, double beta2,
                           double eps, double weight_decay,
                           const moe_rt_tensor *lr, const moe_rt_tensor *step,
                           const moe_rt_tensor *scale,
                           const moe_rt_tensor *param,
                           const moe_rt_tensor *grad,
                           const moe_rt_tensor *exp_avg,
                           const moe_rt_tensor *exp_avg_sq,
                           moe_rt_tensor *new_param, moe_rt_tensor *new_exp_avg,
                           moe_rt_tensor *new_exp_avg_sq);
moe_rt_status moe_rt_sgd_momentum(moe_rt_stream s, double momentum,
                                  double weight_decay, const moe_rt_tensor *lr,
                                  const moe_rt_tensor *scale,
                                  const moe_rt_tensor *param,
                                  const moe_rt_tensor *grad,
                                  const moe_rt_tensor *buffer,
                                  moe_rt_tensor *new_param,
                                  moe_rt_tensor *new_buffer);
/* out (an F32 scalar) = (accumulate ? out : 0) + sum of x^2 (moe.sum_squares,
 * one call per input). */
moe_rt_status moe_rt_sum_squares(moe_rt_stream s, const moe_rt_tensor *x,
                                 int accumulate, moe_rt_tensor *out);
/* out = min(1, max_norm / (sqrt(sum_sq) + 1e-6)) (moe.clip_coef). */
moe_rt_status moe_rt_clip_coef(moe_rt_stream s, const moe_rt_tensor *sum_sq,
                               double max_norm, moe_rt_tensor *out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOE_RT_OPS_H */
