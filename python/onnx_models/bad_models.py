#!/usr/bin/python3
"""Broken ONNX models: each is wrong in one way the importer must report
with a clear error naming the file (and the ONNX node where there is one),
a non-zero exit and no output file. Written with onnx.helper.

  bad_models.py <variant> -o out.onnx
  bad_models.py --list

  not-onnx        a text file
  truncated       a valid model cut in the middle of an initializer
  empty-graph     a ModelProto whose graph has no nodes
  no-graph        a ModelProto without a graph
  dangling        a node reads a value nothing produces
  dangling-unnamed  the same, the node without a name
  duplicate-output  two nodes assign the same value
  arity           a MatMul with one input (the fuzzer's first finding)
  unsupported-op  a block whose attention sublayer contains a Hardmax
  dynamic-dims    token input [batch, seq] with symbolic dims
  embed-rank      the embedding Gather reads a 3-D table
  no-tokens       no integer input feeds an embedding Gather
  no-blocks       embedding straight into the LM head
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Graph, embedding, lm_head, norm  # noqa: E402

V, B, N, M = 32, 2, 4, 16


def head(g, x):
    out = lm_head(g, norm(g, x, "layer-fused", M, "final_norm"), M, V)
    g.output(out, shape=[B, N, V])
    return g.model()


def tiny_valid():
    g = Graph()
    return head(g, embedding(g, V, M, B, N))


def unsupported_op():
    """A pre-norm block with a Hardmax where softmax belongs, then a dense
    FFN; the attention matchers cannot claim it."""
    g = Graph()
    x = embedding(g, V, M, B, N)
    h = norm(g, x, "layer-fused", M, "block0.ln1")
    q = g.op("MatMul", [h, g.weight("wq", M, M)], name="q_proj")
    k = g.op("MatMul", [h, g.weight("wk", M, M)], name="k_proj")
    v = g.op("MatMul", [h, g.weight("wv", M, M)], name="v_proj")
    kt = g.op("Transpose", [k], name="k_t", perm=[0, 2, 1])
    s = g.op("MatMul", [q, kt], name="scores")
    p = g.op("Hardmax", [s], name="mystery", axis=-1)
    a = g.op("MatMul", [p, v], name="attn_v")
    o = g.op("MatMul", [a, g.weight("wo", M, M)], name="o_proj")
    x1 = g.op("Add", [x, o], name="resid0")
    h2 = norm(g, x1, "layer-fused", M, "block0.ln2")
    u = g.op("Relu", [g.op("MatMul", [h2, g.weight("up", M, 2 * M)])])
    d = g.op("MatMul", [u, g.weight("down", 2 * M, M)])
    x2 = g.op("Add", [x1, d], name="resid1")
    return head(g, x2)


def build(variant, path):
    if variant == "not-onnx":
        with open(path, "w") as f:
            f.write("this is a text file, not an ONNX model\n" * 4)
        return
    if variant == "truncated":
        data = tiny_valid().SerializeToString()
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
        return
    if variant == "no-graph":
        m = onnx.ModelProto()
        m.ir_version = 8
        m.opset_import.add().version = 17
        onnx.save_model(m, path)
        return
    if variant == "empty-graph":
        g = Graph()
        g.input("tokens", TensorProto.INT64, [B, N])
        m = g.model()
        onnx.save_model(m, path)
        return
    g = Graph()
    if variant == "dangling":
        x = embedding(g, V, M, B, N)
        y = g.op("Add", [x, "nowhere"], name="reads_nothing")
        m = head(g, y)
    elif variant == "dangling-unnamed":
        x = embedding(g, V, M, B, N)
        y = g.op("Add", [x, "nowhere"], name="unnamed")
        g.nodes[-1].name = ""
        m = head(g, y)
    elif variant == "duplicate-output":
        x = embedding(g, V, M, B, N)
        g.nodes.append(helper.make_node("Relu", [x], ["twice"], name="first"))
        g.nodes.append(helper.make_node("Neg", [x], ["twice"], name="second"))
        m = head(g, "twice")
    elif variant == "arity":
        x = embedding(g, V, M, B, N)
        g.nodes.append(helper.make_node("MatMul", [x], ["lonely"],
                                        name="one_input"))
        m = head(g, "lonely")
    elif variant == "unsupported-op":
        m = unsupported_op()
    elif variant == "dynamic-dims":
        x = embedding(g, V, M, "batch", "seq")
        m = head(g, x)
    elif variant == "embed-rank":
        g.input("tokens", TensorProto.INT64, [B, N])
        g.weight("embed", V, M, 2)
        x = g.op("Gather", ["embed", "tokens"], name="embed_gather")
        m = head(g, g.op("Reshape", [x, g.const([B, N, 2 * M], np.int64)]))
    elif variant == "no-tokens":
        g.input("features", TensorProto.FLOAT, [B, N, M])
        m = head(g, "features")
    elif variant == "no-blocks":
        m = tiny_valid()
    else:
        raise SystemExit(f"unknown variant {variant!r}; see --list")
    onnx.save_model(m, path)


VARIANTS = ["not-onnx", "truncated", "no-graph", "empty-graph", "dangling",
            "dangling-unnamed", "duplicate-output", "arity",
            "unsupported-op", "dynamic-dims", "embed-rank", "no-tokens",
            "no-blocks"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variant", nargs="?")
    ap.add_argument("-o", "--output")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list or not a.variant:
        print("\n".join(VARIANTS))
        return
    if not a.output:
        ap.error("-o is required")
    build(a.variant, a.output)


if __name__ == "__main__":
    main()
