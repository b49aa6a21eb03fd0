#!/usr/bin/python3
"""FlowMoE Table 2 models at full size as ONNX files whose weights are
absent: every initializer is declared with its shape and an external-data
location that does not exist, so the file is a few hundred kilobytes while
describing billions of parameters. moe-opt imports such a model shape-only
(moe.source still names each initializer), and the passes, the model
summary and the simulator work on it as on any model.

The graph is written with ONNX Runtime contrib ops (docs/frontend/
contrib-ops.md): LayerNormalization or SimplifiedLayerNormalization (RMS),
Q/K/V MatMuls, com.microsoft.MultiHeadAttention, an output MatMul, a router
MatMul and com.microsoft.MoE (fc1 [E, H, M], fc2 [E, M, H]). Rotary
embeddings are left out: com.microsoft's rotary caches would need data.

  table2_shape_only.py llama2-moe -o llama2-moe.onnx   (presets of
  python/gen_model_mlir.py: gpt2-tiny-moe, bert-large-moe, llama2-moe,
  llama2-moe-l, deepseek-v2-s, deepseek-v2-m)
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import gen_model_mlir as gen  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

TABLE2 = ["gpt2-tiny-moe", "bert-large-moe", "llama2-moe", "llama2-moe-l",
          "deepseek-v2-s", "deepseek-v2-m"]


class Writer:
    def __init__(self, data_file):
        self.nodes, self.inits, self.data_file = [], [], data_file
        self.params = 0

    def weight(self, name, shape):
        """A float32 initializer whose bytes would be in the (absent)
        external-data file."""
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape)
        t.data_location = TensorProto.EXTERNAL
        size = 4
        for d in shape:
            size *= d
        for key, value in (("location", self.data_file),
                           ("offset", str(self.params * 4)),
                           ("length", str(size))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        self.params += size // 4
        self.inits.append(t)
        return name

    def node(self, op, inputs, name, domain=None, **attrs):
        self.nodes.append(helper.make_node(op, inputs, [name], name=name,
                                           domain=domain, **attrs))
        return name


def build(c, data_file):
    w = Writer(data_file)
    M, H, E, k = c.embed, c.hidden, c.experts, c.top_k
    D = c.heads * c.head_dim

    def norm(x, prefix):
        scale = w.weight(prefix + ".scale", [M])
        if c.norm == "layer":
            return w.node("LayerNormalization",
                          [x, scale, w.weight(prefix + ".bias", [M])], prefix,
                          axis=-1, epsilon=1e-5)
        return w.node("SimplifiedLayerNormalization", [x, scale], prefix,
                      axis=-1, epsilon=1e-5)

    h = w.node("Gather", [w.weight("embed.table", [c.vocab, M]), "tokens"],
               "embed")
    for b in range(c.layers):
        p = f"block{b}"
        x = norm(h, p + ".attn_norm")
        q = w.node("MatMul", [x, w.weight(p + ".q_proj", [M, D])], p + ".q")
        kk = w.node("MatMul", [x, w.weight(p + ".k_proj", [M, D])], p + ".k")
        v = w.node("MatMul", [x, w.weight(p + ".v_proj", [M, D])], p + ".v")
        a = w.node("MultiHeadAttention", [q, kk, v], p + ".mha",
                   domain="com.microsoft", num_heads=c.heads,
                   unidirectional=int(c.causal))
        o = w.node("MatMul", [a, w.weight(p + ".o_proj", [D, M])], p + ".o")
        h = w.node("Add", [h, o], p + ".attn_add")
        x = norm(h, p + ".moe_norm")
        logits = w.node("MatMul", [x, w.weight(p + ".router", [M, E])],
                        p + ".router_logits")
        y = w.node("MoE", [x, logits, w.weight(p + ".fc1", [E, H, M]), "",
                           w.weight(p + ".fc2", [E, M, H])],
                   p + ".moe", domain="com.microsoft", k=k,
                   activation_type=c.activation, normalize_routing_weights=0)
        h = w.node("Add", [h, y], p + ".moe_add")
    h = norm(h, "final_norm")
    logits = w.node("MatMul", [h, w.weight("lm_head.weight", [M, c.vocab])],
                    "lm_head")
    graph = helper.make_graph(
        w.nodes, c.name.replace("-", "_"),
        [helper.make_tensor_value_info("tokens", TensorProto.INT64,
                                       [c.batch, c.seq])],
        [helper.make_tensor_value_info(logits, TensorProto.FLOAT,
                                       [c.batch, c.seq, c.vocab])],
        w.inits)
    model = helper.make_model(
        graph, producer_name="table2_shape_only.py",
        opset_imports=[helper.make_opsetid("", 17),
                       helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model, w.params


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("preset", choices=TABLE2)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    c = gen.PRESETS[args.preset]
    data = os.path.basename(args.output) + ".data"
    model, params = build(c, data)
    onnx.save_model(model, args.output)
    print(f"wrote {args.output}: {c.layers} blocks, {c.experts} experts, "
          f"{params / 1e9:.2f} B parameters declared, data file '{data}' "
          f"absent ({os.path.getsize(args.output)} bytes on disk)")


if __name__ == "__main__":
    main()
