#!/usr/bin/env python3
"""Rewrite an expert-placed step's dumps in the plain step's layout.

Under an expert placement (moe-run --expert-placement RANKS, a step
scheduled with expert-placement=1; docs/load-aware.md §2) rank g holds the
experts e with RANKS[e] = g, in increasing e, where the plain step's rank g
holds experts g S ... g S + S - 1. This reads the step (STEP.mlir: which
parameters, and which optimizer state, are expert weights: the operands
of moe.expert) and its `moe-run --dump` files PREFIX.rankR, and writes
OUT.rankR holding what the plain step's rank R would hold: every expert
tensor's slots put back in plain order, every other value as it is.
compare_dumps.py then compares them with the plain step's dumps. The
expert-parallel group is every rank of the dump (rank R is group index R).
Standard library only.

  placed_dumps_to_plain.py STEP.mlir RANKS PREFIX OUT
"""
import glob
import re
import sys


def expert_names(path):
    """The moe.param / moe.state names of the step's expert weights."""
    text = open(path).read()
    names = {}
    for m in re.finditer(r'(%arg\d+): tensor<[^>]*>\s*\{([^}]*)\}', text):
        name = re.search(r'moe\.(?:param|state) = "([^"]+)"', m.group(2))
        if name:
            names[m.group(1)] = name.group(1)
    experts = set()
    for m in re.finditer(r'moe\.expert\s.*?up\((%arg\d+)\)'
                         r'(?:\s+gate\((%arg\d+)\))?\s+down\((%arg\d+)\)',
                         text):
        experts.update(names[a] for a in m.groups() if a in names)
    if not experts:
        sys.exit(f"error: {path}: no moe.expert reads a parameter")
    # Optimizer state of an expert weight ("<param>.exp_avg", ...) too.
    states = {n for n in names.values()
              if any(n.startswith(e + ".") for e in experts)}
    return experts | states


def load(path):
    values = {}
    for line in open(path):
        parts = line.split()
        values[parts[0]] = (parts[1], parts[2:])
    return values


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    step, ranks_text, prefix, out = sys.argv[1:]
    expert_rank = [int(x) for x in re.split(r"[,\s]+", ranks_text.strip())]
    files = sorted(glob.glob(prefix + ".rank*"))
    dumps = {int(p.rsplit(".rank", 1)[1]): load(p) for p in files}
    G, E = len(dumps), len(expert_rank)
    if G == 0 or E % G:
        sys.exit(f"error: {E} experts over {G} dump files")
    S = E // G
    held = [[e for e in range(E) if expert_rank[e] == g] for g in range(G)]
    if any(len(h) != S for h in held):
        sys.exit(f"error: RANKS must give every rank {S} experts")
    names = expert_names(step)
    for q in sorted(dumps):
        lines = []
        for name, (size, data) in dumps[q].items():
            if name in names:
                per = len(data) // S
                plain = []
                for e in range(q * S, (q + 1) * S):
                    g = expert_rank[e]
                    s = held[g].index(e)
                    plain += dumps[g][name][1][s * per:(s + 1) * per]
                data = plain
            lines.append(f"{name} {size} {' '.join(data)}")
        with open(f"{out}.rank{q}", "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
