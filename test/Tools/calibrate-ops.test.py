"""Checks calibrate-ops.test's outputs: every op_scale positive, none for a
collective, and the simulator's compute with them equal to the measured
time of every scaled class plus the unit profile's time of the classes left
at 1 (a class measured below the profiler's 1 us, e.g. the embedding's
forward on a quiet machine, keeps its modelled time) -- an identity, not a
timing bound: the table's columns are rounded to 1 us, so the sum may be off
by one microsecond per row and no more."""
import json
import sys


def load(path):
    """A profile (an object) or moe-simulate's JSON (a list of one)."""
    with open(path) as f:
        value = json.load(f)
    return value[0] if isinstance(value, list) else value


scales = load(sys.argv[1])["op_scale"]
assert scales, "no op_scale written"
assert all(v > 0 for v in scales.values()), scales
collectives = ("moe.dispatch", "moe.combine", "moe.all_reduce",
               "moe.vjp(moe.dispatch)", "moe.vjp(moe.combine)")
assert not any(k in collectives for k in scales), scales
rows = [line.split("|") for line in open(sys.argv[2])
        if line.startswith("| moe.") or line.startswith("| arith.")]
assert set(r[1].strip() for r in rows) == set(scales), (rows, scales)
measured = sum(float(r[2]) for r in rows)
modelled = sum(float(r[3]) for r in rows)
unit, scaled = load(sys.argv[3]), load(sys.argv[4])
expected = unit["compute_busy_us"] - modelled + measured
assert abs(scaled["compute_busy_us"] - expected) <= len(rows), (
    expected, scaled["compute_busy_us"])
# The unit profile (1 ns per flop) is far from this runtime's kernels, so the
# scales matter: without them the simulated compute would be >2x off.
assert abs(unit["compute_busy_us"] - measured) / measured > 0.5, (
    measured, unit["compute_busy_us"])
print("ok")
