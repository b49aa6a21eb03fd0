#!/usr/bin/python3
"""Validated import: does the imported model compute what the ONNX file
computes?

Runs the original ONNX file with ONNX Runtime (an independent reference:
the `onnxruntime` package scripts/setup.sh installs into .pydeps/) and the
imported IR with the project's runtime (moe-opt -> the FlowMoE pipeline ->
moe-run) on the same tokens, labels and weights, and compares each rank's
loss:

  PASS <model>: loss max|Δ| = 3.1e-07 (rel 5.2e-08) over 2 ranks ...
  FAIL <model>: rank 0 loss 4.21337 (imported) vs 4.39071 (ONNX Runtime)

The weights are the file's own (moe-run reads them through moe.source);
the tokens and labels are moe-run's (--dump-inputs), fed to ONNX Runtime.
A model whose logits are its output gets the mean cross-entropy computed
here; a model that outputs its loss (labels input) is run as is.

  validate_import.py model.onnx [--ranks 2] [--grid 1x2]
      [--moe-opt build/bin/moe-opt] [--moe-run build/bin/moe-run]
      [--import-flags "--onnx-capacity-factor=2"] [--rtol 1e-5]

Run with /usr/bin/python3; .pydeps/ (next to python/) is put on the path.
Exit status: 0 PASS, 1 FAIL, 2 the import or a run failed, or ONNX Runtime
cannot run the file (e.g. com.microsoft.MoE has no CPU kernel in 1.19) —
the error is printed.
"""
import argparse
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, ".pydeps"))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

import compare_dumps  # noqa: E402

try:
    import onnx  # noqa: E402
    import onnxruntime as ort  # noqa: E402
except ImportError as e:
    sys.exit(f"error: {e}: run scripts/setup.sh (it installs onnxruntime "
             f"into {os.path.join(ROOT, '.pydeps')})")


def run(cmd, what):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"ERROR: {what} failed (exit {p.returncode}):\n"
              f"  {' '.join(shlex.quote(c) for c in cmd)}\n{p.stderr}"
              f"{p.stdout[-2000:]}", file=sys.stderr)
        sys.exit(2)
    return p


def load_inputs(path):
    """One rank's moe-run --dump-inputs file: {name: numpy array}."""
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            dims = [int(d) for d in parts[1].split("x") if d]
            out[parts[0]] = np.array([float(x) for x in parts[2:]]).reshape(
                dims)
    return out


def cross_entropy(logits, labels):
    """Mean token cross-entropy in float64 (logits [B, N, V])."""
    x = logits.astype(np.float64).reshape(-1, logits.shape[-1])
    x = x - x.max(axis=1, keepdims=True)
    logp = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(x.shape[0]), labels.reshape(-1)].mean())


class OrtModel:
    """The ONNX file under ONNX Runtime: which input is which, and what it
    outputs (logits or the loss)."""

    def __init__(self, path):
        self.model = onnx.load(path)
        # ONNX Runtime (1.19) crashes on a LayerNormalization whose absent
        # bias is spelled as an empty input name, as torch exports
        # nn.LayerNorm(bias=False) (microsoft/onnxruntime#18967). A
        # trailing empty name means the same as no input (ONNX IR spec,
        # optional inputs), so such files run with those names dropped.
        edited = False
        for n in self.model.graph.node:
            while len(n.input) > 0 and n.input[-1] == "":
                n.input.pop()
                edited = True
        self.session = ort.InferenceSession(
            self.model.SerializeToString() if edited else path,
            providers=["CPUExecutionProvider"])
        inits = {i.name for i in self.model.graph.initializer}
        self.inputs = [i for i in self.session.get_inputs()
                       if i.name not in inits]
        self.output = self.session.get_outputs()[0]

    def loss(self, tokens, labels):
        feeds = {}
        for i in self.inputs:
            dtype = np.int32 if "int32" in i.type else np.int64
            # The token input comes first in every model the importer takes;
            # a second integer input is the labels.
            src = tokens if not feeds else labels
            feeds[i.name] = src.astype(dtype)
        out = self.session.run([self.output.name], feeds)[0]
        if out.ndim == 0 or out.size == 1:
            return float(out.reshape(-1)[0])
        return cross_entropy(out, labels.astype(np.int64))


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("model")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--grid", default=None,
                    help="NODESxGPUS for moe-opt (default 1xRANKS)")
    bindir = os.path.join(ROOT, "build", "bin")
    ap.add_argument("--moe-opt", default=os.path.join(bindir, "moe-opt"))
    ap.add_argument("--moe-run", default=os.path.join(bindir, "moe-run"))
    ap.add_argument("--mpirun", default="mpirun --allow-run-as-root "
                    "--oversubscribe")
    ap.add_argument("--import-flags", default="",
                    help="extra moe-opt flags for the import")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--atol", type=float, default=1e-6)
    ap.add_argument("--workdir", help="keep the intermediate files here")
    args = ap.parse_args()
    grid = args.grid or f"1x{args.ranks}"

    work = args.workdir or tempfile.mkdtemp(prefix="validate-import-")
    os.makedirs(work, exist_ok=True)
    ir = os.path.join(work, "imported.mlir")
    step = os.path.join(work, "step.mlir")
    run([args.moe_opt, os.path.abspath(args.model), f"--onnx-grid={grid}",
         "-o", ir] + shlex.split(args.import_flags), "the import (moe-opt)")
    # A dropless model runs with the capacity that drops nothing.
    run([args.moe_opt, ir, "--moe-bound-dropless",
         "--moe-flowmoe-pipeline=degree=1 policy=vanilla lr=1e-9", "-o", step],
        "the training-step pipeline (moe-opt)")
    dumps = os.path.join(work, "in")
    results = os.path.join(work, "out")
    run(shlex.split(args.mpirun) + ["-np", str(args.ranks), args.moe_run, step,
                                    "--dump-inputs", dumps, "--dump", results,
                                    "--timeout", "120"], "moe-run")

    try:
        ref = OrtModel(args.model)
    except Exception as e:  # noqa: BLE001 - ORT raises its own classes
        # E.g. com.microsoft.MoE has no CPU kernel in ONNX Runtime 1.19.
        print(f"ERROR: ONNX Runtime {ort.__version__} cannot run "
              f"{args.model}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    worst_abs, worst_rel, lines, bad = 0.0, 0.0, [], []
    for r in range(args.ranks):
        inputs = load_inputs(f"{dumps}.rank{r}")
        tokens, labels = inputs["arg0"], inputs["arg1"]
        ours = compare_dumps.load_file(f"{results}.rank{r}")["loss"][0]
        theirs = ref.loss(tokens, labels)
        d = abs(ours - theirs)
        worst_abs = max(worst_abs, d)
        worst_rel = max(worst_rel, d / max(abs(theirs), 1e-30))
        lines.append(f"  rank {r}: loss {ours:.7f} (imported) vs "
                     f"{theirs:.7f} (ONNX Runtime)")
        if d > args.atol + args.rtol * abs(theirs):
            bad.append(r)
    name = os.path.basename(args.model)
    if bad:
        print(f"FAIL {name}: the imported model's loss differs from ONNX "
              f"Runtime's on rank(s) {', '.join(map(str, bad))} "
              f"(max|Δ| = {worst_abs:.3g}, tolerance {args.atol:g} + "
              f"{args.rtol:g}·|loss|)")
        print("\n".join(lines))
        return 1
    print(f"PASS {name}: loss max|Δ| = {worst_abs:.3g} (rel {worst_rel:.3g}) "
          f"over {args.ranks} ranks, weights from the file, ONNX Runtime "
          f"{ort.__version__}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
