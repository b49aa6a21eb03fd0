#!/usr/bin/python3
"""Helpers shared by the ONNX test-model writers (python/onnx_models/*.py).

Only onnx + numpy (Debian's python3-onnx 1.12, /usr/bin/python3). The
pieces here write the parts every transformer has - the token input, the
embedding Gather, the norms in their various ONNX spellings, the LM head -
and save models inline or with external data.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def init(name, array):
    """An initializer from a numpy array (float32 unless integer)."""
    a = np.asarray(array)
    if a.dtype.kind == "f":
        a = a.astype(np.float32)
    return numpy_helper.from_array(a, name)


def rand(rng, *shape, scale=0.02):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def scalar(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


class Graph:
    """Accumulates nodes and initializers; names nodes `<op>_<n>` unless
    told, so that error messages in tests name something stable."""

    def __init__(self, rng=None):
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []
        self.rng = rng or np.random.default_rng(0)
        self.count = 0

    def fresh(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def op(self, op_type, inputs, name=None, outputs=1, domain=None, **attrs):
        name = name or self.fresh(op_type.lower())
        outs = [f"{name}_out{i}" if i else f"{name}_out"
                for i in range(outputs)]
        kw = dict(attrs)
        if domain:
            kw["domain"] = domain
        self.nodes.append(helper.make_node(op_type, list(inputs), outs,
                                           name=name, **kw))
        return outs[0] if outputs == 1 else outs

    def weight(self, name, *shape, value=None):
        arr = value if value is not None else rand(self.rng, *shape)
        self.inits.append(init(name, arr))
        return name

    def const(self, value, dtype=np.float32):
        name = self.fresh("c")
        self.inits.append(scalar(name, value, dtype))
        return name

    def input(self, name, elem, shape):
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def output(self, name, elem=TensorProto.FLOAT, shape=None):
        self.outputs.append(helper.make_tensor_value_info(name, elem, shape))

    def model(self, name="g", opset=17, extra_opsets=(), producer="moe-test"):
        graph = helper.make_graph(self.nodes, name, self.inputs, self.outputs,
                                  self.inits)
        opsets = [helper.make_opsetid("", opset)]
        opsets += [helper.make_opsetid(d, v) for d, v in extra_opsets]
        m = helper.make_model(graph, opset_imports=opsets,
                              producer_name=producer)
        m.ir_version = 8
        return m


# ---------------------------------------------------------------- pieces ----
def embedding(g, vocab, embed, batch, seq, tokens="tokens", table="embed"):
    g.input(tokens, TensorProto.INT64, [batch, seq])
    g.weight(table, vocab, embed)
    return g.op("Gather", [table, tokens], name="embed_gather")


def norm(g, x, kind, m, prefix, eps=1e-5, axis=-1):
    """A norm in one of its ONNX spellings:
    layer-fused       LayerNormalization (opset 17)
    layer-decomposed  ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add
    rms-div           Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul weight
    rms-recip         Mul x x, ReduceMean, Add eps, Sqrt, Reciprocal, Mul
    rms-rsqrt         Pow 2, ReduceMean, Add eps, Sqrt, Div(1, .), Mul
    rms-fused         ai.onnx RMSNormalization (opset 23)
    rms-simplified    com.microsoft SimplifiedLayerNormalization
    `axis` other than -1 writes a norm over another axis (which the
    importer must not take for the model's norm).
    """
    scale = g.weight(f"{prefix}.weight", m,
                     value=1 + rand(g.rng, m, scale=0.1))
    bias = f"{prefix}.bias"
    if kind == "layer-fused":
        g.weight(bias, m)
        return g.op("LayerNormalization", [x, scale, bias],
                    name=f"{prefix}_ln", axis=axis, epsilon=eps)
    if kind == "rms-fused":
        return g.op("RMSNormalization", [x, scale], name=f"{prefix}_rms",
                    axis=-1, epsilon=eps)
    if kind == "rms-simplified":
        return g.op("SimplifiedLayerNormalization", [x, scale],
                    name=f"{prefix}_sln", domain="com.microsoft", axis=-1,
                    epsilon=eps)
    if kind == "layer-decomposed":
        g.weight(bias, m)
        mean = g.op("ReduceMean", [x], axes=[axis], keepdims=1)
        d = g.op("Sub", [x, mean])
        sq = g.op("Pow", [d, g.const(2.0)])
        var = g.op("ReduceMean", [sq], axes=[axis], keepdims=1)
        std = g.op("Sqrt", [g.op("Add", [var, g.const(eps)])])
        y = g.op("Div", [d, std])
        return g.op("Add", [g.op("Mul", [y, scale]), bias])
    if kind.startswith("rms-"):
        sq = (g.op("Mul", [x, x]) if kind == "rms-recip"
              else g.op("Pow", [x, g.const(2.0)]))
        ms = g.op("ReduceMean", [sq], axes=[axis], keepdims=1)
        s = g.op("Sqrt", [g.op("Add", [ms, g.const(eps)])])
        if kind == "rms-div":
            y = g.op("Div", [x, s])
        elif kind == "rms-recip":
            y = g.op("Mul", [x, g.op("Reciprocal", [s])])
        elif kind == "rms-rsqrt":
            y = g.op("Mul", [x, g.op("Div", [g.const(1.0), s])])
        else:
            raise ValueError(kind)
        return g.op("Mul", [scale, y])
    raise ValueError(kind)


NORMS = ["layer-fused", "layer-decomposed", "rms-div", "rms-recip",
         "rms-rsqrt", "rms-fused", "rms-simplified"]


def lm_head(g, x, embed, vocab, name="lm_head.weight"):
    g.weight(name, embed, vocab)
    return g.op("MatMul", [x, name], name="lm_head")


# ---------------------------------------------------------------- saving ----
def save(model, path, external=False):
    """Writes `model`; with `external`, every initializer's bytes go to
    `<path>.data` next to it (onnx's save_as_external_data), which is how
    models over 2 GiB are shipped."""
    if external:
        location = os.path.basename(path) + ".data"
        onnx.save_model(model, path, save_as_external_data=True,
                        all_tensors_to_one_file=True, location=location,
                        size_threshold=0)
    else:
        onnx.save_model(model, path)


def resave_external(src, dst):
    """Re-saves an existing .onnx file with external data; returns the data
    file's path."""
    m = onnx.load(src)
    save(m, dst, external=True)
    return dst + ".data"


# ------------------------------------------------------------------ CLI ----
def norm_model(kind, eps=1e-5, vocab=32, batch=2, seq=4, embed=16,
               axis=-1, computed_scale=False):
    """tokens -> embedding -> one norm (`kind`, see norm()) -> output `y`:
    the loader / norm-matcher tests' model."""
    g = Graph()
    x = embedding(g, vocab, embed, batch, seq)
    y = norm(g, x, kind, embed, "n", eps, axis)
    if computed_scale:
        # The scale as a computed value (Identity of the initializer).
        for n in g.nodes:
            for i, v in enumerate(n.input):
                if v == "n.weight":
                    n.input[i] = "scale_copy"
        g.nodes.insert(0, helper.make_node("Identity", ["n.weight"],
                                           ["scale_copy"], name="copy"))
    g.nodes.append(helper.make_node("Identity", [y], ["y"], name="out"))
    g.output("y", shape=[batch, seq, embed])
    extra = [("com.microsoft", 1)] if kind == "rms-simplified" else []
    return g.model(opset=23 if kind == "rms-fused" else 17,
                   extra_opsets=extra)


def _head(m):
    """(embedding Gather, LM-head MatMul) of a model the importer accepts."""
    gather = next(n for n in m.graph.node if n.op_type == "Gather")
    inits = {t.name: t for t in m.graph.initializer}
    vocab = inits[gather.input[0]].dims[0]
    head = next(n for n in m.graph.node
                if n.op_type == "MatMul" and n.input[1] in inits
                and list(inits[n.input[1]].dims)[-1] == vocab)
    return gather, head, inits


def edit(m, how):
    """Rewrites a working model's head or outputs (the walk's tests):
    tie-head        the LM head reads Transpose(embedding table)
    transpose-head  the LM head weight stored V x M behind a Transpose
    head-bias       an Add of a bias after the LM head
    extra-output    an extra graph output computed from the stream
    loss-sum        the loss with reduction=sum (needs a --loss model)
    mystery-ffn     the last com.microsoft MoE becomes an unknown op
    escape-external external-data locations become "../<location>"
    """
    g = m.graph
    if how in ("tie-head", "transpose-head", "head-bias", "extra-output"):
        gather, head, inits = _head(m)
    if how == "tie-head":
        w = head.input[1]
        g.node.insert(list(g.node).index(head), helper.make_node(
            "Transpose", [gather.input[0]], ["table_t"], name="tie",
            perm=[1, 0]))
        head.input[1] = "table_t"
        g.initializer.remove(inits[w])
    elif how == "transpose-head":
        w = inits[head.input[1]]
        arr = numpy_helper.to_array(w).T.copy()
        g.initializer.remove(w)
        g.initializer.append(numpy_helper.from_array(arr, "head_vm"))
        g.node.insert(list(g.node).index(head), helper.make_node(
            "Transpose", ["head_vm"], ["head_mv"], name="head_t",
            perm=[1, 0]))
        head.input[1] = "head_mv"
    elif how == "head-bias":
        out = head.output[0]
        vocab = inits[head.input[1]].dims[-1]
        g.initializer.append(init("head_bias", np.zeros(vocab)))
        head.output[0] = out + ".nobias"
        g.node.insert(list(g.node).index(head) + 1, helper.make_node(
            "Add", [out + ".nobias", "head_bias"], [out], name="head_bias_add"))
    elif how == "extra-output":
        g.node.append(helper.make_node("ReduceSum", [gather.output[0]],
                                       ["aux"], name="aux_sum", keepdims=0))
        g.output.append(helper.make_tensor_value_info(
            "aux", TensorProto.FLOAT, None))
    elif how == "loss-sum":
        loss = next(n for n in g.node
                    if n.op_type in ("SoftmaxCrossEntropyLoss",
                                     "NegativeLogLikelihoodLoss"))
        for a in loss.attribute:
            if a.name == "reduction":
                a.s = b"sum"
                break
        else:
            loss.attribute.append(helper.make_attribute("reduction", "sum"))
    elif how == "escape-external":
        for t in g.initializer:
            for e in t.external_data:
                if e.key == "location":
                    e.value = "../" + e.value
    elif how == "mystery-ffn":
        moe = [n for n in g.node if n.op_type == "MoE"][-1]
        moe.op_type, moe.domain = "MysteryMoE", "com.example"
        m.opset_import.append(helper.make_opsetid("com.example", 1))
    else:
        raise SystemExit(f"unknown edit {how!r}")
    return m


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(
        description="write a small test model: norm-model <kind> | "
                    "resave-external <src> | <edit> <src> (see edit())")
    ap.add_argument("what", choices=["norm-model", "resave-external"] +
                    ["tie-head", "transpose-head", "head-bias",
                     "extra-output", "loss-sum", "mystery-ffn",
                     "escape-external"])
    ap.add_argument("arg")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--external", action="store_true")
    ap.add_argument("--axis", type=int, default=-1)
    ap.add_argument("--computed-scale", action="store_true")
    a = ap.parse_args()
    if a.what == "norm-model":
        save(norm_model(a.arg, a.eps, axis=a.axis,
                        computed_scale=a.computed_scale),
             a.output, a.external)
    elif a.what == "resave-external":
        resave_external(a.arg, a.output)
    else:
        save(edit(onnx.load(a.arg, load_external_data=False), a.what),
             a.output)
