"""Checks calibrate-ops.test's outputs: every op_scale positive, none for a
collective, and the simulator's compute with them equal to the measured
compute (within 5 %), unlike the unit profile's."""
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
measured = sum(float(line.split("|")[2]) for line in open(sys.argv[2])
               if line.startswith("| moe.") or line.startswith("| arith."))
unit, scaled = load(sys.argv[3]), load(sys.argv[4])
off = lambda sim: abs(sim["compute_busy_us"] - measured) / measured
assert off(scaled) < 0.05, (measured, scaled["compute_busy_us"])
assert off(unit) > 0.5, (measured, unit["compute_busy_us"])
print("ok")
