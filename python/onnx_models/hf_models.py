#!/usr/bin/python3
"""Tiny random-weight Hugging Face MoE models (transformers' own modeling
code, 4.40.x) exported to ONNX the way a user would: torch.onnx.export,
opset 17, of a module taking (input_ids, labels) and returning the loss.

  hf_models.py <family> -o out.onnx [--expect out.json]

Families: mixtral (MixtralForCausalLM), qwen2-moe (Qwen2MoeForCausalLM),
jamba (JambaForCausalLM: Mamba layers, refused at its Conv). DBRX, the
other MoE family of transformers 4.40, is left out: its modeling code
needs torch >= 2.1 (LayerNorm(bias=...)), and the project's torch is 1.13. Configs are tiny (2
layers, M=64, 4 experts) with rope_theta 10000 unless --theta says
otherwise; weights are the model's random init with norm gains pushed far
from 1 and biases far from 0 (HF initialises them to 0), so that every
op matters. Needs transformers from .pydeps/
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
    raise SystemExit(f"hf_models.py: unknown family '{family}'")


FAMILIES = ["mixtral", "qwen2-moe", "jamba"]


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


def build(family, theta=10000.0):
    torch.manual_seed(0)
    cfg, cls = config(family, theta)
    lm = cls(cfg).eval()
    with torch.no_grad():
        for name, p in lm.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.copy_(0.25 + 2.0 * torch.rand_like(p))
            elif p.dim() == 1:  # biases (Qwen2's q/k/v): HF zeroes them
                p.normal_(0.0, 0.5)
            elif p.dim() >= 2:
                p.normal_(0.0, 0.08)
    return WithLoss(lm).eval(), cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("family", choices=FAMILIES)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--theta", type=float, default=10000.0)
    ap.add_argument("--expect")
    args = ap.parse_args()
    model, cfg = build(args.family, args.theta)
    ids = torch.randint(0, VOCAB, (B, N))
    labels = torch.randint(0, VOCAB, (B, N))
    with torch.no_grad():
        torch.onnx.export(model, (ids, labels), args.output, opset_version=17,
                          input_names=["input_ids", "labels"],
                          output_names=["loss"], do_constant_folding=False)
    if args.expect:
        with open(args.expect, "w") as f:
            json.dump(cfg.to_dict(), f, indent=1, sort_keys=True,
                      default=str)


if __name__ == "__main__":
    main()
