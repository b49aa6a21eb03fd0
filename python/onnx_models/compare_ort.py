#!/usr/bin/python3
"""Do two ONNX files compute the same function? Runs both under ONNX
Runtime on the same random tokens and compares their first outputs
(logits) element-wise:

  SAME a.onnx b.onnx: max|Δ| = 2.4e-07 (rel 1.1e-07 of max|out| 2.2)
  DIFFERENT a.onnx b.onnx: max|Δ| = 0.31 ...

onnx-norm-placement.test uses it to show that an RMSNorm with its gain
written before the normalisation (w·x·rsqrt(mean(x²)+ε)) and one with the
gain after it are the same function, numerically, and that a gain inside
the statistic is not. Exit status 0 SAME, 1 DIFFERENT.

  compare_ort.py a.onnx b.onnx [--rtol 1e-5] [--seed 0]
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from validate_import import OrtModel  # noqa: E402 (puts .pydeps on the path)

import numpy as np  # noqa: E402


def outputs(path, tokens):
    m = OrtModel(path)
    if len(m.inputs) != 1:
        sys.exit(f"error: {path}: expected a logits model with one token "
                 f"input, found {len(m.inputs)} inputs")
    i = m.inputs[0]
    dtype = np.int32 if "int32" in i.type else np.int64
    return m.session.run([m.output.name], {i.name: tokens.astype(dtype)})[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, default=1e-5,
                    help="of the largest |output| (default %(default)g)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    shape = OrtModel(args.a).inputs[0].shape
    vocab = next(i for i in OrtModel(args.a).model.graph.initializer
                 if len(i.dims) == 2).dims[0]
    rng = np.random.default_rng(args.seed)
    tokens = rng.integers(0, vocab, size=shape)
    x, y = outputs(args.a, tokens), outputs(args.b, tokens)
    if x.shape != y.shape:
        print(f"DIFFERENT {args.a} {args.b}: output shapes {x.shape} vs "
              f"{y.shape}")
        return 1
    d = float(np.abs(x.astype(np.float64) - y).max())
    scale = max(float(np.abs(x).max()), 1e-30)
    same = d <= args.rtol * scale
    print(f"{'SAME' if same else 'DIFFERENT'} {os.path.basename(args.a)} "
          f"{os.path.basename(args.b)}: max|Δ| = {d:.3g} (rel {d / scale:.3g} "
          f"of max|out| {scale:.3g}; tolerance rel {args.rtol:g})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
