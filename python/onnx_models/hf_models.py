#!/usr/bin/python3
"""Tiny random-weight Hugging Face MoE models (transformers' own modeling
code, 4.40.x) exported to ONNX the way a user would: torch.onnx.export,
opset 17, of a module taking (input_ids, labels) and returning the loss.

  hf_models.py <family> -o out.onnx [--expect out.json]

Families: mixtral (MixtralForCausalLM), qwen2-moe (Qwen2MoeForCausalLM),
dbrx (DbrxForCausalLM: clip_qkv, a fused Wqkv split into Q/K/V, expert
w1 / v1 / w2 each one parameter for all experts, the router's L1
renormalisation, LayerNorms without bias), and the ones the importer
refuses by name: jamba (JambaForCausalLM: Mamba layers), nllb-moe
(NllbMoeForConditionalGeneration: encoder-decoder; exported with
(input_ids, decoder_input_ids, labels)), and the two torch 1.13 cannot
export at all (its ONNX exporter asserts on their boolean-mask index_put):
switch-transformers (SwitchTransformersForConditionalGeneration, an
encoder-decoder) and gptsan (GPTSanJapaneseForConditionalGeneration); for
those --expect still writes the config (the config route's input) before
the export fails (docs/frontend/torch-patterns.md).

DBRX's modeling code builds nn.LayerNorm(bias=False), which needs
torch >= 2.1; the project's torch is 1.13, so build() constructs it with
a LayerNorm whose bias is None, which is what torch 2.1's bias=False is
(F.layer_norm with weight only).

Configs are tiny (2 layers, M=64, 4 experts) with rope_theta 10000 unless
--theta says otherwise; weights are the model's random init with norm
gains pushed far from 1 and biases far from 0 (HF initialises them to 0),
so that every op matters. Needs transformers from .pydeps/
(scripts/setup.sh); run with /usr/bin/python3 (Debian's torch 1.13).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                ".pydeps"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

B, N, VOCAB = 2, 16, 96


def config(family, theta):
    import transformers as tf
    common = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=64,
                  rope_theta=theta, attn_implementation="eager",
                  use_cache=False)
    if family == "mixtral":
        return tf.MixtralConfig(intermediate_size=96, num_key_value_heads=2,
                                num_local_experts=4, num_experts_per_tok=2,
                                **common), tf.MixtralForCausalLM
    if family == "qwen2-moe":
        return tf.Qwen2MoeConfig(intermediate_size=96,
                                 moe_intermediate_size=48,
                                 shared_expert_intermediate_size=96,
                                 num_key_value_heads=2, num_experts=4,
                                 num_experts_per_tok=2, norm_topk_prob=False,
                                 decoder_sparse_step=1,
                                 **common), tf.Qwen2MoeForCausalLM
    if family == "jamba":
        return tf.JambaConfig(intermediate_size=96, num_key_value_heads=2,
                              num_experts=4, num_experts_per_tok=2,
                              attn_layer_period=2, attn_layer_offset=1,
                              expert_layer_period=1, expert_layer_offset=0,
                              use_mamba_kernels=False,
                              **{k: v for k, v in common.items()
                                 if k != "rope_theta"}), tf.JambaForCausalLM
    if family == "dbrx":
        # DBRX's clip_qkv (8 as published; HF 4.40's attention cannot run
        # without one: clamp(None, None) raises) at 0.6, so that the clamp
        # cuts about half of this tiny model's Q/K/V values and matters.
        return tf.DbrxConfig(d_model=64, n_heads=4, n_layers=2,
                             max_seq_len=64, vocab_size=VOCAB,
                             attn_config=dict(kv_n_heads=2, clip_qkv=0.6,
                                              rope_theta=theta),
                             ffn_config=dict(ffn_hidden_size=48,
                                             moe_num_experts=4, moe_top_k=2),
                             attn_implementation="eager",
                             use_cache=False), tf.DbrxForCausalLM
    if family == "nllb-moe":
        return tf.NllbMoeConfig(vocab_size=VOCAB, d_model=64,
                                encoder_layers=2, decoder_layers=2,
                                encoder_attention_heads=4,
                                decoder_attention_heads=4,
                                encoder_ffn_dim=96, decoder_ffn_dim=96,
                                num_experts=4, expert_capacity=16,
                                max_position_embeddings=64,
                                use_cache=False), \
            tf.NllbMoeForConditionalGeneration
    if family == "switch-transformers":
        return tf.SwitchTransformersConfig(
            vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=96, num_layers=2,
            num_decoder_layers=2, num_heads=4, num_experts=4,
            expert_capacity=16, num_sparse_encoder_layers=1,
            num_sparse_decoder_layers=1, use_cache=False), \
            tf.SwitchTransformersForConditionalGeneration
    if family == "gptsan":
        return tf.GPTSanJapaneseConfig(
            vocab_size=VOCAB, max_position_embeddings=64, d_model=64,
            d_ff=96, d_ext=64, d_spout=16, num_switch_layers=2,
            num_ext_layers=0, num_heads=4, num_experts=4,
            expert_capacity=16, use_cache=False, separator_token_id=VOCAB - 1,
            pad_token_id=VOCAB - 2, eos_token_id=VOCAB - 3), \
            tf.GPTSanJapaneseForConditionalGeneration
    raise SystemExit(f"hf_models.py: unknown family '{family}'")


FAMILIES = ["mixtral", "qwen2-moe", "jamba", "dbrx", "nllb-moe",
            "switch-transformers", "gptsan"]
SEQ2SEQ = ("nllb-moe", "switch-transformers")


class LayerNormBiasOptional(nn.LayerNorm):
    """torch 2.1's nn.LayerNorm(..., bias=False) on torch 1.13: the bias
    parameter is None, so F.layer_norm applies the weight only."""

    def __init__(self, shape, eps=1e-5, elementwise_affine=True, bias=True,
                 **kw):
        super().__init__(shape, eps, elementwise_affine, **kw)
        if not bias:
            self.bias = None


def construct(cls, cfg):
    """cls(cfg), with LayerNorm(bias=False) available while it builds."""
    plain = nn.LayerNorm
    nn.LayerNorm = LayerNormBiasOptional
    try:
        return cls(cfg)
    finally:
        nn.LayerNorm = plain


class WithLoss(nn.Module):
    """(input_ids, labels) -> mean next-token-free cross-entropy of the
    logits against labels (the project's loss), as a user would wrap a
    causal LM for export."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, labels):
        logits = self.lm(input_ids=input_ids).logits
        return nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


class Seq2SeqWithLoss(nn.Module):
    """(input_ids, decoder_input_ids, labels) -> the same loss, for an
    encoder-decoder model."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, decoder_input_ids, labels):
        logits = self.lm(input_ids=input_ids,
                         decoder_input_ids=decoder_input_ids).logits
        return nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def build(family, theta=10000.0):
    torch.manual_seed(0)
    cfg, cls = config(family, theta)
    lm = construct(cls, cfg)
    lm.eval()
    with torch.no_grad():
        for name, p in lm.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.copy_(0.25 + 2.0 * torch.rand_like(p))
            elif p.dim() == 1:  # biases (Qwen2's q/k/v): HF zeroes them
                p.normal_(0.0, 0.5)
            elif p.dim() >= 2:
                p.normal_(0.0, 0.08)
    wrap = Seq2SeqWithLoss if family in SEQ2SEQ else WithLoss
    return wrap(lm).eval(), cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("family", choices=FAMILIES)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--theta", type=float, default=10000.0)
    ap.add_argument("--expect")
    args = ap.parse_args()
    model, cfg = build(args.family, args.theta)
    if args.expect:  # first: the config route's input even if export fails
        with open(args.expect, "w") as f:
            json.dump(cfg.to_dict(), f, indent=1, sort_keys=True,
                      default=str)
    ids = torch.randint(0, VOCAB, (B, N))
    labels = torch.randint(0, VOCAB, (B, N))
    inputs, names = (ids, labels), ["input_ids", "labels"]
    if isinstance(model, Seq2SeqWithLoss):
        inputs = (ids, torch.randint(0, VOCAB, (B, N)), labels)
        names = ["input_ids", "decoder_input_ids", "labels"]
    with torch.no_grad():
        torch.onnx.export(model, inputs, args.output, opset_version=17,
                          input_names=names,
                          output_names=["loss"], do_constant_folding=False)


if __name__ == "__main__":
    main()
