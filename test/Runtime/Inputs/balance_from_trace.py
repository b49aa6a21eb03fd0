#!/usr/bin/env python3
"""Recompute a step's balance line from its routing trace.

Reads the trace (docs/routing-trace-format.md) and moe-run's stderr: for
each record of the trace's first step, the tokens each rank's experts
receive (the header's expert-ranks), max / mean; the worst record's ratio
and block must be what the step's "balance: tokens/rank max/mean X (block
B)" line says. Prints "balance line matches the trace under its expert
ranks" or exits 1 naming both. Standard library only.

  balance_from_trace.py TRACE STDERR
"""
import re
import sys


def main():
    trace, err = sys.argv[1:]
    lines = [l.split() for l in open(trace) if l.strip()]
    ranks = {}
    grid = 0
    i = 0
    while lines[i][0] != "records":
        w = lines[i]
        if w[0] == "grid":
            grid = int(w[2]) * int(w[4])
        if w[0] == "block":
            ranks[int(w[1])] = [int(x) for x in w[w.index("expert-ranks") + 1:]]
        i += 1
    i += 1
    worst, block, first = 0.0, None, None
    while i < len(lines) and lines[i][0] == "record":
        step, b = int(lines[i][3]), int(lines[i][7])
        first = step if first is None else first
        i += 2  # the record and sample-ranks lines
        load = [0] * grid
        while i < len(lines) and lines[i][0] not in ("record", "end"):
            for e, n in enumerate(int(x) for x in lines[i]):
                load[ranks[b][e]] += n
            i += 1
        ratio = max(load) / (sum(load) / grid)
        if step == first and ratio > worst + 1e-12:
            worst, block = ratio, b
    text = open(err).read()
    m = re.search(rf"step {first} balance: tokens/rank max/mean "
                  r"([0-9.]+) \(block (\d+)\)", text)
    if not m:
        sys.exit(f"error: no balance line for step {first} in {err}")
    if f"{worst:.2f}" != m.group(1) or block != int(m.group(2)):
        sys.exit(f"error: the trace gives {worst:.2f} (block {block}), the "
                 f"balance line {m.group(1)} (block {m.group(2)})")
    print("balance line matches the trace under its expert ranks")


if __name__ == "__main__":
    main()
