/* moe_rt/kept_activations.h - vjps on their forward's intermediates.
 *
 * keep != 0: the expert and attention ops queued on `stream`
 * (moe_rt_expert, moe_rt_expert_v, moe_rt_attention[_biased]) keep their
 * forward's intermediates until the vjp of the same call (the same
 * tensors) runs on such a stream, which then skips recomputing them, with
 * the same bits: the experts' up and gate projections of the filled rows
 * (rows x H floats each; the vjp runs 6 GEMMs instead of 8), attention's
 * normed input, Q, K, V, softmax and context per sample. The caller
 * promises that those tensors do not change between the forward and its
 * vjp, as a step's values never do: moe-run and generated steps turn it on
 * for their compute streams. Off by default; CPU streams only (a CUDA
 * stream recomputes). runtime/src/cpu/KeptActivations.h. */
#ifndef MOE_RT_KEPT_ACTIVATIONS_H
#define MOE_RT_KEPT_ACTIVATIONS_H

#include "moe_rt/moe_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

moe_rt_status moe_rt_stream_keep_activations(moe_rt_stream stream, int keep);

#ifdef __cplusplus
}
#endif

#endif /* MOE_RT_KEPT_ACTIVATIONS_H */
