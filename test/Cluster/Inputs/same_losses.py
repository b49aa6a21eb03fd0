"""Compares the "step s loss L" lines of two trainer outputs within fp32
tolerance (relative 1e-5): prints "N loss lines equal", or each step that
differs, and exits 1."""
import sys


def losses(path):
    return {int(l.split()[1]): float(l.split()[3])
            for l in open(path) if l.startswith("step ")}


a, b = losses(sys.argv[1]), losses(sys.argv[2])
if sorted(a) != sorted(b) or not a:
    sys.exit(f"the runs printed different steps: {sorted(a)} vs {sorted(b)}")
bad = [s for s in a if abs(a[s] - b[s]) > 1e-5 * abs(a[s])]
for s in bad:
    print(f"step {s}: {a[s]} and {b[s]} differ")
if not bad:
    print(f"{len(a)} loss lines equal")
sys.exit(1 if bad else 0)
