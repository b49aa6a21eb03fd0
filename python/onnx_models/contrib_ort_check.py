#!/usr/bin/python3
"""Checks the contrib importer's reading of ONNX Runtime's op layouts
against ONNX Runtime itself (manual check; onnxruntime is not a project
dependency: run with PYTHONPATH pointing at an onnxruntime install).

For each supported contrib_models.py variant, the model's logits from
onnxruntime are compared with a numpy forward pass that uses the weights
exactly as the importer maps them (docs/frontend/contrib-ops.md) and the
moe ops' semantics: Q/K/V/O = MatMul weights as they are; expert up =
fc1^T (or fc3^T when gated, fc1^T then being the gate), down = fc2^T per
expert; softmax top-k routing (renormalised with normalize_routing_weights);
rotate-half rotary with base 10000; GQA head h reads KV head h / (H / KV).
GELU is the tanh form here because ONNX Runtime's MoE kernels use it (the
moe runtime uses the exact erf form; see the docs).

  PYTHONPATH=/path/to/onnxruntime python3 contrib_ort_check.py [variant...]

With --e2e BUILD_DIR it instead imports each model with BUILD_DIR/bin/
moe-opt (grid 1x1, a capacity factor of E/k so nothing is dropped, the
FlowMoE pipeline), runs one step with BUILD_DIR/bin/moe-run (weights from
the ONNX file) and compares that step's loss with ONNX Runtime's loss on
the same tokens and labels (moe-run --dump-inputs): the whole chain of
matchers, builder, weight loader and runtime against ONNX Runtime. Gated
(fc3) models, which ONNX Runtime's CPU MoE cannot run, are compared with
the numpy forward pass instead.
"""
import os
import re
import subprocess
import tempfile
import math
import sys

import numpy as np
import onnx
from onnx import numpy_helper

import contrib_models as cm


def layer_norm(x, s, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * s + (0 if b is None else b)


def rms_norm(x, s, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * s


def rotary(x, heads, d):
    # x: [B, N, heads*d], rotate-half, base 10000.
    b, n, _ = x.shape
    x = x.reshape(b, n, heads, d).copy()
    half = d // 2
    inv = 10000.0 ** (-np.arange(half) * 2.0 / d)
    ang = np.arange(n)[:, None] * inv[None, :]
    c, s = np.cos(ang)[None, :, None, :], np.sin(ang)[None, :, None, :]
    x1, x2 = x[..., :half].copy(), x[..., half:].copy()
    x[..., :half] = x1 * c - x2 * s
    x[..., half:] = x2 * c + x1 * s
    return x.reshape(b, n, heads * d)


def attention(x, wq, wk, wv, wo, heads, kvh, causal, rot):
    b, n, _ = x.shape
    d = wq.shape[1] // heads
    q, k, v = x @ wq, x @ wk, x @ wv
    if rot:
        q, k = rotary(q, heads, d), rotary(k, kvh, d)
    q = q.reshape(b, n, heads, d).transpose(0, 2, 1, 3)
    k = k.reshape(b, n, kvh, d).transpose(0, 2, 1, 3)
    v = v.reshape(b, n, kvh, d).transpose(0, 2, 1, 3)
    rep = heads // kvh
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    if causal:
        s = s + np.triu(np.full((n, n), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ v).transpose(0, 2, 1, 3).reshape(b, n, heads * d)
    return o @ wo


def act(name, h):
    if name == "relu":
        return np.maximum(h, 0)
    if name == "gelu":
        return 0.5 * h * (1 + np.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))
    return h / (1 + np.exp(-h))


def moe(x, wg, up, gate, down, k, normalize, activation):
    b, n, m = x.shape
    t = x.reshape(-1, m)
    logits = t @ wg
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    idx = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(p, idx, -1)
    if normalize:
        w /= w.sum(-1, keepdims=True)
    y = np.zeros_like(t)
    for i in range(t.shape[0]):
        for j in range(k):
            e = idx[i, j]
            h = t[i] @ up[e]
            a = act(activation, t[i] @ gate[e]) * h if gate is not None \
                else act(activation, h)
            y[i] += w[i, j] * (a @ down[e])
    return y.reshape(b, n, m)


def reference(model, v, tokens):
    w = {i.name: numpy_helper.to_array(i).astype(np.float64)
         for i in model.graph.initializer}
    eps = {"layer": 1e-5}.get(v["norm"], 1e-6)

    def norm(x, p):
        if v["norm"] == "layer":
            return layer_norm(x, w[p + ".scale"], w[p + ".bias"], eps)
        return rms_norm(x, w[p + ".scale"], eps)

    h = w["embed.table"][tokens]
    for b in range(2):
        p = f"block{b}.attn"
        xn = norm(h, f"block{b}.attn_norm")
        if v["attn"] == "msattn":
            qkv = w[p + ".qkv_weight"]
            dq = qkv.shape[1] // 3
            wq, wk, wv = qkv[:, :dq], qkv[:, dq:2 * dq], qkv[:, 2 * dq:]
        elif v["packed_qkv"]:
            qkv = w[p + ".qkv_proj"]
            d = qkv.shape[1] // (cm.HEADS + 2 * v["kv_heads"])
            hq, hk = cm.HEADS * d, v["kv_heads"] * d
            wq, wk, wv = qkv[:, :hq], qkv[:, hq:hq + hk], qkv[:, hq + hk:]
        else:
            wq, wk, wv = w[p + ".q_proj"], w[p + ".k_proj"], w[p + ".v_proj"]
        h = h + attention(xn, wq, wk, wv, w[p + ".o_proj"], cm.HEADS,
                          v["kv_heads"], v["causal"], v["rotary"])
        q = f"block{b}"
        xn = norm(h, f"block{b}.moe_norm")
        fc1 = w[q + ".fc1"].transpose(0, 2, 1)
        down = w[q + ".fc2"].transpose(0, 2, 1)
        if v["gated"]:
            up, gate = w[q + ".fc3"].transpose(0, 2, 1), fc1
        else:
            up, gate = fc1, None
        a = "silu" if v["activation"] == "swiglu" else v["activation"]
        router = w[q + ".router"]
        if v["gemm_router"]:
            router = router.T
        h = h + moe(xn, router, up, gate, down, v["k"],
                    v["normalize"], a)
    h = norm(h, "final_norm")
    return h @ w["lm_head"]


def check(name):
    import onnxruntime as ort
    # ONNX Runtime's CPU GroupQueryAttention needs head_size % 16 == 0.
    cm.EMBED = 64 if cm.VARIANTS[name]["attn"] == "gqa" else 32
    model, v = cm.build(name)
    tokens = np.random.default_rng(1).integers(0, cm.VOCAB,
                                               (cm.BATCH, cm.SEQ))
    # ONNX Runtime 1.31's CPU MoE may run in place on its input buffer and
    # then reads zeros (its output came out all-zero when the pre-norm's
    # value was not needed elsewhere); keeping every value alive as a graph
    # output stops the buffer reuse.
    keep_values_alive(model)
    try:
        sess = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        got = sess.run(["lm_head.out"], {"tokens": tokens.astype(np.int64)})[0]
    except Exception as e:  # an op ONNX Runtime's CPU provider lacks
        return f"SKIP ({str(e).splitlines()[0][:150]})"
    want = reference(model, v, tokens)
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-9)
    return f"{'OK  ' if err < 1e-3 else 'FAIL'} max rel err {err:.2e}"


def keep_values_alive(model):
    have = {o.name for o in model.graph.output}
    for n in model.graph.node:
        for o in n.output:
            if o not in have:
                model.graph.output.add().name = o


def e2e(name, build):
    import onnxruntime as ort
    cm.EMBED = 64 if cm.VARIANTS[name]["attn"] == "gqa" else 32
    model, v = cm.build(name, loss=True)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        onnx.save(model, path)
        f = cm.EXPERTS / v["k"]
        subprocess.run([os.path.join(build, "bin", "moe-opt"), path,
                        "--onnx-grid=1x1", f"--onnx-capacity-factor={f}",
                        "--moe-flowmoe-pipeline", "-o",
                        os.path.join(d, "m.mlir")], check=True)
        run = subprocess.run(
            ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "1",
             os.path.join(build, "bin", "moe-run"), os.path.join(d, "m.mlir"),
             "--steps", "1", "--dump-inputs", os.path.join(d, "in")],
            check=True, capture_output=True, text=True)
        ours = float(re.search(r"step 1 loss (\S+)", run.stdout).group(1))
        rows = {}
        for line in open(os.path.join(d, "in.rank0")):
            p = line.split()
            rows[p[0]] = np.array([int(x) for x in p[2:]], np.int64).reshape(
                [int(x) for x in p[1].split("x")]) if p[0] in ("arg0", "arg1") \
                else None
    if v["gated"]:
        # ONNX Runtime's CPU MoE has no fc3: compare with the numpy forward
        # (Mixtral's act(x w1) * (x w3) with w1 = fc1, w3 = fc3).
        logits = reference(model, v, rows["arg0"])
        z = logits - logits.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        want = float(-np.take_along_axis(logp, rows["arg1"][..., None],
                                         -1).mean())
        who = "numpy ref"
    else:
        keep_values_alive(model)
        sess = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        want = float(sess.run(["loss.out"], {"tokens": rows["arg0"],
                                             "labels": rows["arg1"]})[0])
        who = "onnxruntime"
    err = abs(ours - want) / abs(want)
    # GELU: ONNX Runtime's MoE uses the tanh form, the moe runtime erf.
    tol = 1e-4 if v["activation"] == "gelu" else 1e-5
    return (f"{'OK  ' if err < tol else 'FAIL'} moe-run loss {ours:.6f}, "
            f"{who} {want:.6f} (rel {err:.1e})")


def main(argv):
    build = None
    if argv[:1] == ["--e2e"]:
        build, argv = argv[1], argv[2:]
    names = argv or [n for n in sorted(cm.VARIANTS) if not n.startswith("err")]
    bad = 0
    for n in names:
        r = e2e(n, build) if build else check(n)
        bad += r.startswith("FAIL")
        print(f"{n:16s} {r}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
