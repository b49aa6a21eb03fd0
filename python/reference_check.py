"""What the PyTorch reference checks share (python/torch_reference.py,
python/onnx_models/check_import_numerics.py): reading what every rank of
`moe-run --dump-inputs` started from, and tallying how far the runtime's
values are from the reference's within fp32 tolerance
(|got - ref| <= atol + rtol * |ref|, as python/compare_dumps.py). Needs
PyTorch (Debian's python3-torch, /usr/bin/python3)."""
import sys

import torch


def add_run_arguments(ap):
    """The options every reference check takes: the run's dumps (prefixes
    of moe-run --dump-inputs / --dump, one file per rank), its rank count
    and learning rate, and the fp32 tolerance."""
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-5)


def load_inputs(path):
    """One rank's `moe-run --dump-inputs` file: {name: float64 tensor}."""
    values = {}
    with open(path) as f:
        for line in f:
            # Single spaces: a scalar's DIMS is empty ("lr  0.01").
            parts = line.rstrip("\n").split(" ")
            dims = [int(d) for d in parts[1].split("x") if d]
            values[parts[0]] = torch.tensor(
                [float(x) for x in parts[2:]],
                dtype=torch.float64).reshape(dims)
    return values


class Tally:
    """Counts values out of tolerance and the worst excess over all checks.
    With `explain`, each check that fails prints a line naming it."""

    def __init__(self, rtol, atol, explain=False):
        self.rtol, self.atol, self.explain = rtol, atol, explain
        self.worst, self.bad, self.count = 0.0, 0, 0

    def check(self, what, ref, got):
        ref = torch.as_tensor(ref).reshape(-1).double()
        got = torch.as_tensor(got).reshape(-1).double()
        if ref.numel() != got.numel():
            sys.exit(f"FAIL: {what}: {ref.numel()} vs {got.numel()} values")
        excess = (got - ref).abs() / (self.atol + self.rtol * ref.abs())
        out = int((excess > 1).sum())
        if self.explain and out:
            print(f"  {what}: {out} values out of tolerance (worst "
                  f"{float(excess.max()):.1f}x)")
        self.worst = max(self.worst, float(excess.max()))
        self.bad += out
        self.count += ref.numel()

    def summary(self):
        return (f"{self.count} values compared, {self.bad} out of tolerance "
                f"(worst {self.worst:.3f} x tolerance)")
