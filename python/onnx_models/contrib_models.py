#!/usr/bin/python3
"""Tiny 2-block MoE transformers written with ONNX Runtime contrib ops (and
the opset-23 ai.onnx Attention / RMSNormalization), for the importer's tests
(lib/Frontend/Onnx/ContribPatterns.cpp).

torch 1.13 cannot export these ops, so the graphs are written directly with
onnx.helper (onnx 1.12 writes any domain and opset). onnx.checker is not run:
it does not know com.microsoft ops nor opset 23. Each block is

  [norm] -> Q/K/V MatMuls -> attention op -> output MatMul -> Add
  [norm] -> router MatMul (2-D logits) -> com.microsoft.MoE -> Add

between an embedding Gather and a final norm + LM-head MatMul (-> logits, or
the mean cross-entropy with --loss). Weights are random initializers laid
out as the ONNX Runtime schemas (docs/ContribOperators.md) say:
fc1/fc3 [E, inter, hidden], fc2 [E, hidden, inter]; projections [in, out].

  contrib_models.py <variant> -o out.onnx [--loss] [--expect out.json]
  contrib_models.py --list

Variants named err-* are deliberately unsupported (one attribute or input
the importer must refuse, naming the node).
"""
import argparse
import json
import math
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Sizes: hidden H differs from M so a wrong transpose shows up in shapes.
VOCAB, BATCH, SEQ, EMBED, HIDDEN, EXPERTS = 64, 2, 8, 32, 48, 4
HEADS, KV_HEADS = 4, 2

# Each variant: norm, attention kind, MoE settings; `attn_attrs` /
# `moe_attrs` add attributes, `attn_extra` / `moe_extra` add inputs (by
# schema position) carrying an initializer of the given kind.
BASE = dict(norm="layer", attn="mha", rotary=False, kv_heads=HEADS,
            causal=True, activation="gelu", k=2, normalize=0, gated=False,
            op="MoE", attn_attrs={}, moe_attrs={}, attn_extra={},
            moe_extra={}, rotary_base=10000.0, reshape_moe_io=False,
            omit_activation=False, packed_qkv=False, router_softmax=False,
            legacy_layout=False, q_bias=False, gemm_router=False, opset=17)


def variant(**kw):
    v = dict(BASE)
    v.update(kw)
    return v


VARIANTS = {
    # --- supported -------------------------------------------------------
    # GPT-style: LayerNorm, com.microsoft.MultiHeadAttention (unidirectional),
    # GELU experts, top-2.
    "mha-gelu": variant(),
    # Switch-style: top-1 ReLU experts, the activation left at its default
    # (relu), bidirectional attention; MoE input/output reshaped to 2-D.
    "mha-relu-top1": variant(activation="relu", k=1, causal=False,
                             omit_activation=True, reshape_moe_io=True),
    # Mixtral-style: SimplifiedLayerNormalization (RMS), GroupQueryAttention
    # with rotary cos/sin caches and 2 KV heads, SiLU experts gated by fc3,
    # renormalised top-2.
    "gqa-mixtral": variant(norm="simplified", attn="gqa", rotary=True,
                           kv_heads=KV_HEADS, activation="silu", gated=True,
                           normalize=1),
    # GQA with rotary but ungated SiLU experts (ONNX Runtime's CPU MoE has
    # no fc3, so contrib_ort_check.py checks rotary with this one).
    "gqa-rotary": variant(norm="simplified", attn="gqa", rotary=True,
                          kv_heads=KV_HEADS, activation="silu", k=1),
    # GQA with packed QKV (one MatMul; key/value inputs empty), no rotary.
    "gqa-packed": variant(attn="gqa", kv_heads=KV_HEADS, packed_qkv=True),
    # activation_type=swiglu, swiglu_fusion=0: fc1 is the gate, fc3 the
    # linear half; alpha 1, beta 0 (plain SwiGLU).
    "gqa-swiglu": variant(norm="simplified", attn="gqa", kv_heads=KV_HEADS,
                          activation="swiglu", gated=True, normalize=1,
                          moe_attrs=dict(swiglu_fusion=0,
                                         activation_alpha=1.0,
                                         activation_beta=0.0)),
    # ai.onnx Attention (opset 23, 3-D Q/K/V with q_num_heads/kv_num_heads,
    # is_causal) with RMSNormalization (opset 23) pre-norms.
    # (Ungated SiLU experts so that ONNX Runtime's CPU MoE, which has no
    # fc3, can run it in contrib_ort_check.py.)
    "attn23-rms": variant(norm="rms23", attn="attn23", kv_heads=KV_HEADS,
                          activation="silu", normalize=1, opset=23),
    # All-zero expert biases change nothing and are accepted; the router is
    # a Gemm with transB=1 (its weight [E, M]).
    "mha-zero-bias": variant(moe_extra={3: "zeros", 5: "zeros"},
                             gemm_router=True),
    # com.microsoft.Attention: one packed [M, 3D] weight input and an
    # all-zero bias (ONNX Runtime's CPU kernel crashes without one).
    "msattn-gelu": variant(attn="msattn", attn_extra={2: "zero_qkv_bias"}),
    # --- unsupported: the importer must refuse these ---------------------
    "err-mha-scale": variant(attn_attrs=dict(scale=0.5)),
    "err-mha-mask": variant(attn_extra={4: "mask"}),
    "err-mha-bias": variant(attn_extra={3: "qkv_bias"}),
    "err-gqa-past": variant(attn="gqa", kv_heads=KV_HEADS,
                            attn_extra={3: "past", 4: "past"}),
    "err-gqa-window": variant(attn="gqa", kv_heads=KV_HEADS,
                              attn_attrs=dict(local_window_size=4)),
    "err-gqa-interleaved": variant(attn="gqa", kv_heads=KV_HEADS,
                                   rotary=True,
                                   attn_attrs=dict(rotary_interleaved=1)),
    "err-gqa-softcap": variant(attn="gqa", kv_heads=KV_HEADS,
                               attn_attrs=dict(softcap=30.0)),
    "err-attn23-softcap": variant(norm="rms23", attn="attn23", opset=23,
                                  attn_attrs=dict(softcap=30.0)),
    "err-attn23-mask": variant(norm="rms23", attn="attn23", opset=23,
                               attn_extra={3: "bool_mask"}),
    "err-moe-sparse-mixer": variant(moe_attrs=dict(use_sparse_mixer=1)),
    "err-moe-bias": variant(moe_extra={3: "random_bias"}),
    "err-moe-swiglu-fused": variant(activation="swiglu",
                                    moe_attrs=dict(swiglu_fusion=1)),
    "err-moe-swiglu-alpha": variant(activation="swiglu", gated=True,
                                    moe_attrs=dict(swiglu_fusion=0,
                                                   activation_alpha=1.702)),
    "err-moe-swiglu-limit": variant(activation="swiglu", gated=True,
                                    moe_attrs=dict(swiglu_fusion=0,
                                                   swiglu_limit=7.0)),
    "err-moe-identity": variant(activation="identity"),
    "err-moe-router-softmax": variant(router_softmax=True),
    "err-qmoe": variant(op="QMoE"),
    # fc1 as [E, hidden, inter], fc2 as [E, inter, hidden] (an older layout).
    "err-moe-legacy-layout": variant(legacy_layout=True),
    # A bias Add after the query projection (not part of the pattern).
    "err-q-bias": variant(q_bias=True),
}


class Graph:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = 0

    def init(self, name, array):
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def weight(self, name, shape, scale=None):
        scale = scale if scale is not None else 1.0 / math.sqrt(shape[-2]
                                                                if len(shape) > 1
                                                                else 1)
        a = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        return self.init(name, a)

    def ints(self, name, values, dtype=np.int64):
        return self.init(name, np.array(values, dtype=dtype))

    def node(self, op, inputs, name, domain="", outputs=1, **attrs):
        outs = [f"{name}.out{i}" if outputs > 1 else f"{name}.out"
                for i in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name,
                                           domain=domain or None, **attrs))
        return outs if outputs > 1 else outs[0]


def norm(g, v, x, prefix):
    """The pre-norm / final norm in the variant's flavour."""
    scale = g.init(prefix + ".scale",
                   (1 + 0.1 * g.rng.standard_normal(EMBED)).astype(np.float32))
    if v["norm"] == "layer":
        bias = g.init(prefix + ".bias",
                      (0.1 * g.rng.standard_normal(EMBED)).astype(np.float32))
        return g.node("LayerNormalization", [x, scale, bias], prefix,
                      axis=-1, epsilon=1e-5)
    if v["norm"] == "rms23":
        return g.node("RMSNormalization", [x, scale], prefix, axis=-1,
                      epsilon=1e-6)
    # ONNX Runtime registers SimplifiedLayerNormalization in the ai.onnx
    # domain (contrib_defs.cc: SetDomain(kOnnxDomain), since version 1).
    return g.node("SimplifiedLayerNormalization", [x, scale], prefix,
                  axis=-1, epsilon=1e-6)


def extra_input(g, kind, name, kv_heads, head_dim, shape=None):
    """An optional input the variant adds to make the node unsupported."""
    if kind == "zeros":  # expert bias of zeros: fc1/fc3 [E, H], fc2 [E, M]
        return g.init(name, np.zeros(shape, np.float32))
    if kind == "random_bias":
        return g.weight(name, shape, scale=0.1)
    if kind == "zero_qkv_bias":
        return g.init(name, np.zeros(3 * HEADS * head_dim, np.float32))
    if kind == "qkv_bias":
        return g.weight(name, [3 * HEADS * head_dim], scale=0.1)
    if kind == "mask":
        return g.init(name, np.ones((BATCH, SEQ), np.int32))
    if kind == "bool_mask":
        return g.init(name, np.tril(np.ones((SEQ, SEQ), bool)))
    if kind == "past":
        return g.init(name, np.zeros((BATCH, kv_heads, 0, head_dim),
                                     np.float32))
    raise ValueError(kind)


def with_extra(inputs, extra):
    inputs = list(inputs)
    for pos, name in sorted(extra.items()):
        while len(inputs) <= pos:
            inputs.append("")
        inputs[pos] = name
    return inputs


def attention(g, v, b, x):
    p = f"block{b}.attn"
    hd = EMBED // HEADS
    kvh = v["kv_heads"]
    xn = norm(g, v, x, f"block{b}.attn_norm")
    extra = {pos: extra_input(g, kind, f"{p}.extra{pos}", kvh, hd)
             for pos, kind in v["attn_extra"].items()}
    attrs = dict(v["attn_attrs"])
    if v["attn"] == "msattn":
        # com.microsoft.Attention: input and one packed [M, 3*D] weight.
        w = g.weight(p + ".qkv_weight", [EMBED, 3 * HEADS * hd])
        a = g.node("Attention", with_extra([xn, w], extra), p + ".op",
                   domain="com.microsoft", num_heads=HEADS,
                   unidirectional=int(v["causal"]), **attrs)
    elif v["packed_qkv"]:
        w = g.weight(p + ".qkv_proj", [EMBED, (HEADS + 2 * kvh) * hd])
        qkv = g.node("MatMul", [xn, w], p + ".qkv")
        a = gqa(g, v, p, [qkv, "", ""], kvh, hd, extra, attrs)
    else:
        q = g.node("MatMul", [xn, g.weight(p + ".q_proj", [EMBED, HEADS * hd])],
                   p + ".q")
        if v["q_bias"]:
            q = g.node("Add", [q, g.weight(p + ".q_bias", [HEADS * hd])],
                       p + ".q_bias_add")
        k = g.node("MatMul", [xn, g.weight(p + ".k_proj", [EMBED, kvh * hd])],
                   p + ".k")
        val = g.node("MatMul",
                     [xn, g.weight(p + ".v_proj", [EMBED, kvh * hd])], p + ".v")
        if v["attn"] == "mha":
            a = g.node("MultiHeadAttention", with_extra([q, k, val], extra),
                       p + ".op", domain="com.microsoft", num_heads=HEADS,
                       unidirectional=int(v["causal"]), **attrs)
        elif v["attn"] == "gqa":
            a = gqa(g, v, p, [q, k, val], kvh, hd, extra, attrs)
        else:  # ai.onnx Attention, opset 23, 3-D inputs
            a = g.node("Attention", with_extra([q, k, val], extra), p + ".op",
                       q_num_heads=HEADS, kv_num_heads=kvh,
                       is_causal=int(v["causal"]), **attrs)
    return g.node("MatMul", [a, g.weight(p + ".o_proj", [HEADS * hd, EMBED])],
                  p + ".o")


def gqa(g, v, p, qkv, kvh, hd, extra, attrs):
    # seqlens_k = total length - 1 per batch entry; total_sequence_length.
    seqlens = g.init(p + ".seqlens_k", np.full((BATCH,), SEQ - 1, np.int32))
    total = g.init(p + ".total_seq", np.array(SEQ, np.int32))
    inputs = qkv + ["", "", seqlens, total]
    if v["rotary"]:
        pos = np.arange(2 * SEQ, dtype=np.float64)[:, None]
        inv = v["rotary_base"] ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
        inputs += [g.init(p + ".cos_cache", np.cos(pos * inv).astype(np.float32)),
                   g.init(p + ".sin_cache", np.sin(pos * inv).astype(np.float32))]
    return g.node("GroupQueryAttention", with_extra(inputs, extra), p + ".op",
                  domain="com.microsoft", num_heads=HEADS, kv_num_heads=kvh,
                  do_rotary=int(v["rotary"]), **attrs)


def moe(g, v, b, x):
    p = f"block{b}"
    xn = norm(g, v, x, f"block{b}.moe_norm")
    flat = g.ints(p + ".flat_shape", [BATCH * SEQ, EMBED])
    x2 = g.node("Reshape", [xn, flat], p + ".moe_flat")
    if v["gemm_router"]:  # nn.Linear on 2-D tokens: Gemm, W [E, M]
        logits = g.node("Gemm", [x2, g.weight(p + ".router",
                                              [EXPERTS, EMBED])],
                        p + ".router_logits", transB=1)
    else:
        logits = g.node("MatMul",
                        [x2, g.weight(p + ".router", [EMBED, EXPERTS])],
                        p + ".router_logits")
    if v["router_softmax"]:
        logits = g.node("Softmax", [logits], p + ".router_softmax", axis=-1)
    fc1_rows = HIDDEN
    if v["activation"] == "swiglu" and not v["gated"]:
        fc1_rows = 2 * HIDDEN  # fused gate and linear halves
    if v["legacy_layout"]:
        fc1 = g.weight(p + ".fc1", [EXPERTS, EMBED, fc1_rows])
        fc2 = g.weight(p + ".fc2", [EXPERTS, HIDDEN, EMBED])
    else:
        fc1 = g.weight(p + ".fc1", [EXPERTS, fc1_rows, EMBED])
        fc2 = g.weight(p + ".fc2", [EXPERTS, EMBED, HIDDEN])
    inputs = [x2 if v["reshape_moe_io"] else xn, logits, fc1, "", fc2]
    if v["gated"]:
        inputs += ["", g.weight(p + ".fc3", [EXPERTS, HIDDEN, EMBED])]
    if v["op"] == "QMoE":
        # QMoE's inputs interleave scales after each weight; the importer
        # must refuse the op before reading them.
        inputs = [inputs[0], inputs[1], fc1,
                  g.weight(p + ".fc1_scales", [EXPERTS, HIDDEN]), "", fc2,
                  g.weight(p + ".fc2_scales", [EXPERTS, EMBED])]
    bias_shapes = {3: [EXPERTS, HIDDEN], 5: [EXPERTS, EMBED],
                   7: [EXPERTS, HIDDEN]}
    extra = {pos: extra_input(g, kind, f"{p}.moe_extra{pos}", 0, 0,
                              bias_shapes.get(pos))
             for pos, kind in v["moe_extra"].items()}
    attrs = dict(k=v["k"], normalize_routing_weights=v["normalize"])
    if not v["omit_activation"]:
        attrs["activation_type"] = v["activation"]
    if v["op"] == "QMoE":
        attrs["expert_weight_bits"] = 8
    attrs.update(v["moe_attrs"])
    y = g.node(v["op"], with_extra(inputs, extra), p + ".moe",
               domain="com.microsoft", **attrs)
    if v["reshape_moe_io"]:
        y = g.node("Reshape", [y, g.ints(p + ".moe_shape",
                                         [BATCH, SEQ, EMBED])], p + ".moe_out")
    return y


def build(name, loss=False, seed=0):
    v = VARIANTS[name]
    g = Graph(seed)
    table = g.weight("embed.table", [VOCAB, EMBED], scale=0.1)
    h = g.node("Gather", [table, "tokens"], "embed")
    for b in range(2):
        h = g.node("Add", [h, attention(g, v, b, h)], f"block{b}.attn_add")
        h = g.node("Add", [h, moe(g, v, b, h)], f"block{b}.moe_add")
    h = norm(g, v, h, "final_norm")
    logits = g.node("MatMul", [h, g.weight("lm_head", [EMBED, VOCAB])],
                    "lm_head")
    inputs = [helper.make_tensor_value_info("tokens", TensorProto.INT64,
                                            [BATCH, SEQ])]
    if loss:
        inputs.append(helper.make_tensor_value_info(
            "labels", TensorProto.INT64, [BATCH, SEQ]))
        flat = g.node("Reshape", [logits, g.ints("logits_shape",
                                                 [BATCH * SEQ, VOCAB])],
                      "logits_flat")
        lab = g.node("Reshape", [ "labels", g.ints("labels_shape",
                                                  [BATCH * SEQ])], "labels_flat")
        out = g.node("SoftmaxCrossEntropyLoss", [flat, lab], "loss",
                     reduction="mean")
        outputs = [helper.make_tensor_value_info(out, TensorProto.FLOAT, [])]
    else:
        outputs = [helper.make_tensor_value_info(
            logits, TensorProto.FLOAT, [BATCH, SEQ, VOCAB])]
    graph = helper.make_graph(g.nodes, f"contrib_{name}".replace("-", "_"),
                              inputs, outputs, g.inits)
    opsets = [helper.make_opsetid("", v["opset"]),
              helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets,
                              producer_name="contrib_models.py")
    model.ir_version = 8 if v["opset"] <= 17 else 10
    return model, v


def expectation(name, v):
    """What the importer must find (for tests that read it)."""
    act = v["activation"]
    if act == "swiglu":
        act = "silu"
    return dict(
        variant=name, blocks=2, vocab=VOCAB, batch=BATCH, seq=SEQ,
        embed=EMBED, hidden=HIDDEN, experts=EXPERTS, top_k=v["k"],
        normalize=bool(v["normalize"]), activation=act, gated=v["gated"],
        heads=HEADS, kv_heads=v["kv_heads"], head_dim=EMBED // HEADS,
        causal=v["causal"], rotary=v["rotary"],
        norm="layer" if v["norm"] == "layer" else "rms")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variant", nargs="?", choices=sorted(VARIANTS))
    ap.add_argument("-o", "--output")
    ap.add_argument("--loss", action="store_true",
                    help="output the mean cross-entropy against `labels`")
    ap.add_argument("--expect", help="write the expected spec as JSON")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(sorted(VARIANTS)))
        return 0
    if not args.variant or not args.output:
        ap.error("a variant and -o are required")
    model, v = build(args.variant, loss=args.loss)
    onnx.save(model, args.output)
    if args.expect:
        with open(args.expect, "w") as f:
            json.dump(expectation(args.variant, v), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
