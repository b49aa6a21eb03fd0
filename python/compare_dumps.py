#!/usr/bin/env python3
"""Compare the per-rank result dumps of two `moe-run --dump` runs.

Each dump file (PREFIX.rankN) holds one line per returned value: the loss
and every updated parameter. Values must agree within fp32 tolerance:
|a - b| <= atol + rtol * |a|. Prints the largest differences; exits 1 when
any value is out of tolerance or the dumps do not hold the same values.

  compare_dumps.py /tmp/base /tmp/other [--rtol 1e-4] [--atol 1e-5]

--mean-over-ranks NAME compares value NAME (the loss) as its mean over the
ranks: a step that moves samples between ranks (NetMoE) has each rank's
loss over other samples, and only the mean is the model's loss.
"""
import argparse
import glob
import sys


def load_file(path):
    """One rank's `moe-run --dump` file: {name: [values]}."""
    values = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            name, count = parts[0], int(parts[1])
            data = [float(x) for x in parts[2:]]
            if len(data) != count:
                sys.exit(f"error: {path}: {name} holds {len(data)} of "
                         f"{count} values")
            values[name] = data
    return values


def load(prefix):
    files = sorted(glob.glob(prefix + ".rank*"))
    if not files:
        sys.exit(f"error: no dump files {prefix}.rank*")
    values = {}
    for path in files:
        rank = path.rsplit(".rank", 1)[1]
        for name, data in load_file(path).items():
            values[(rank, name)] = data
    return values


def rank_mean(values, name):
    """`values` with every rank's `name` replaced by their mean (rank '*')."""
    parts = [v for (rank, n), v in values.items() if n == name]
    if not parts:
        sys.exit(f"error: no value {name} to average over ranks")
    out = {k: v for k, v in values.items() if k[1] != name}
    out[("*", name)] = [sum(x) / len(parts) for x in zip(*parts)]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("other")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--mean-over-ranks", metavar="NAME", default=None)
    args = ap.parse_args()
    base, other = load(args.base), load(args.other)
    if args.mean_over_ranks:
        base, other = (rank_mean(v, args.mean_over_ranks)
                       for v in (base, other))
    if set(base) != set(other):
        print(f"FAIL: different values: {sorted(set(base) ^ set(other))[:5]}")
        return 1
    worst, where, bad = 0.0, None, 0
    for key, a in base.items():
        b = other[key]
        if len(a) != len(b):
            print(f"FAIL: {key} has {len(a)} vs {len(b)} values")
            return 1
        for i, (x, y) in enumerate(zip(a, b)):
            excess = abs(x - y) - (args.atol + args.rtol * abs(x))
            if excess > 0:
                bad += 1
            scaled = abs(x - y) / (args.atol + args.rtol * abs(x))
            if scaled > worst:
                worst, where = scaled, (key, i, x, y)
    (rank, name), i, x, y = where if where else (("-", "-"), 0, 0, 0)
    print(f"compared {len(base)} values over {len({k[0] for k in base} - {'*'})} "
          f"ranks: {bad} out of tolerance; worst {worst:.3f} x tolerance at "
          f"rank {rank} {name}[{i}] ({x} vs {y})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
