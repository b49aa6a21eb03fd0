#!/usr/bin/env python3
"""Check an imported ONNX model's training step against the PyTorch module
it was exported from.

The model comes from torch_models.py (same style, same seed, so the same
weights as the ONNX file). moe-run ran one step of the imported, scheduled
model on P ranks and wrote what each rank started from (--dump-inputs) and
its results (--dump: loss and SGD-updated parameters). This script:
  1. maps every parameter back to the PyTorch weights named in its
     `moe.source` (read from the imported IR) and checks moe-run started
     from exactly those values — the importer's weight mapping;
  2. recomputes the step in float64 on all ranks' tokens at once (replicated
     weights shared, each rank's batch its own routing and capacity, the
     loss the mean over ranks) and checks the loss and every updated
     parameter — the importer's semantics.
Run with Debian's /usr/bin/python3 (python3-torch).

  check_import_numerics.py mixtral --ir imported.mlir --inputs IN \\
      --results OUT --ranks 2 --lr 1.0

A style `hf-<family>` (hf-mixtral, hf-qwen2-moe) rebuilds transformers'
module of hf_models.py instead (--theta: the rope_theta it was exported
with); the comparison is then against HF's own autograd.
"""
import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import compare_dumps  # noqa: E402

try:
    import torch
except ImportError:
    sys.exit("error: needs PyTorch (Debian: python3-torch; run with "
             "/usr/bin/python3)")
import torch_models  # noqa: E402
from reference_check import Tally, add_run_arguments, load_inputs  # noqa: E402


def parse_sources(text):
    """{moe.param name: source dict} from printed IR (#moe.source<...>)."""
    sources = {}
    for m in re.finditer(r'moe\.param = "([^"]+)", moe\.source = '
                         r'#moe\.source<', text):
        i = m.end()
        while text[i] != ">":  # the first > outside a string ends it
            if text[i] == '"':
                i = text.index('"', i + 1)
            i += 1
        body = text[m.end():i]
        src = {"names": re.findall(r'"([^"]+)"',
                                   re.search(r"names = \[([^\]]*)\]",
                                             body).group(1)),
               "stacked": re.search(r"\bstacked\b", body) is not None,
               "transpose": re.search(r"\btranspose\b", body) is not None,
               "slice": None, "scale": 1.0}
        s = re.search(r"slice = \[([^\]]*)\]", body)
        if s:
            src["slice"] = [int(v) for v in s.group(1).split(",")]
        s = re.search(r"scale = ([-+0-9.eE]+)", body)
        if s:
            src["scale"] = float(s.group(1))
        sources[m.group(1)] = src
    return sources


def apply(src, tensors, gradient=False):
    """A parameter's whole-model value from named tensors, as WeightLoader
    builds it (slice, transpose, stack, scale). A slice's optional fourth
    entry moves stacked name n's begin by n * stride (one fused parameter
    holding every expert, DBRX's w1 / v1 / w2). For a gradient the scale
    divides: d loss / d (s·W) = (d loss / d W) / s."""
    def one(name, n=0):
        t = tensors[name]
        if src["slice"]:
            axis, begin, size = src["slice"][:3]
            stride = src["slice"][3] if len(src["slice"]) > 3 else 0
            t = t.narrow(axis, begin + n * stride, size)
        if src["transpose"]:
            t = t.transpose(-1, -2)
        return t
    if src["stacked"]:
        t = torch.stack([one(name, n)
                         for n, name in enumerate(src["names"])])
    else:
        t = one(src["names"][0])
    return t / src["scale"] if gradient else t * src["scale"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("style")
    ap.add_argument("--ir", required=True, help="the imported IR (moe-opt "
                    "model.onnx output), for its moe.source attributes")
    ap.add_argument("--variant", choices=["no-positions", "prenorm"],
                    help="compare against the module with one op changed "
                    "(for tests that must fail): its position Add dropped, "
                    "or its post-norms moved before the sublayers")
    ap.add_argument("--theta", type=float, default=10000.0,
                    help="hf-* styles: the rope_theta the file was exported "
                         "with (hf_models.py --theta)")
    add_run_arguments(ap)
    args = ap.parse_args()

    with open(args.ir) as f:
        sources = parse_sources(f.read())
    if not sources:
        sys.exit("FAIL: no moe.source attributes in " + args.ir)
    inputs = [load_inputs(f"{args.inputs}.rank{r}") for r in range(args.ranks)]
    results = [compare_dumps.load_file(f"{args.results}.rank{r}")
               for r in range(args.ranks)]
    # Built in float32 as exported (same weights), computed in float64 where
    # the module allows it (its temporaries follow the default dtype; a
    # module that casts masks with .float() is computed in float32).
    if args.style.startswith("hf-"):  # transformers' own module
        import hf_models
        model = hf_models.build(args.style[3:], args.theta)[0]
    else:
        model = torch_models.build(args.style, True)[0]
    if args.variant == "no-positions":
        model.drop_positions = True
    for blk in model.blocks if args.variant == "prenorm" else []:
        blk.as_prenorm = True
    precision = "float64"
    try:
        with torch.no_grad():
            torch.set_default_dtype(torch.float64)
            model.double()(inputs[0]["arg0"].long(), inputs[0]["arg1"].long())
    except RuntimeError:
        torch.set_default_dtype(torch.float32)
        model.float()
        precision = "float32"
    named = dict(model.named_parameters())
    params = [k for k in inputs[0] if not k.startswith("arg")]
    missing = [k for k in params if k not in sources]
    if missing:
        sys.exit(f"FAIL: parameters without a moe.source: {missing}")
    unknown = {n for s in sources.values() for n in s["names"]} - set(named)
    if unknown:
        sys.exit(f"FAIL: moe.source names no PyTorch parameter: {unknown}")

    tally = Tally(args.rtol, args.atol, explain=True)
    check = tally.check

    def rank_share(k, whole, r):
        """The rows of `whole` rank r holds (expert params are split)."""
        local = inputs[r][k].shape[0]
        if ".experts." in k and whole.shape[0] != local:
            return whole[r * local:(r + 1) * local]
        return whole

    # 1. moe-run started from the PyTorch weights, mapped as the IR says.
    with torch.no_grad():
        for k in params:
            whole = apply(sources[k], named)
            for r in range(args.ranks):
                check(f"initial {k} (rank {r})", rank_share(k, whole, r),
                      inputs[r][k])

    # 2. The step: mean loss over the ranks' batches, one SGD step.
    losses = [model(inp["arg0"].long(), inp["arg1"].long()) for inp in inputs]
    loss = torch.stack(losses).mean()
    loss.backward()
    ours = sum(r["loss"][0] for r in results) / args.ranks
    check("loss", loss.detach().reshape(1), [ours])
    with torch.no_grad():
        grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p))
                 for n, p in named.items()}
        for k in params:
            old, grad = apply(sources[k], named), apply(sources[k], grads, True)
            for r in range(args.ranks):
                check(f"updated {k} (rank {r})",
                      rank_share(k, old - args.lr * grad, r), results[r][k])
    variant = f", variant {args.variant}" if args.variant else ""
    print(f"pytorch ({args.style}{variant}, {precision}): loss {float(loss):.6f} vs ours "
          f"{ours:.6f}; {tally.summary()}")
    return 1 if tally.bad else 0


if __name__ == "__main__":
    sys.exit(main())
