#!/usr/bin/env python3
"""Rewrite an expert-placed step's dumps in the plain step's layout.

Under an expert placement (moe-run --expert-placement RANKS, a step
scheduled with expert-placement=1; docs/load-aware.md §2) expert-parallel
rank g holds the experts e with RANKS[e] = g, in increasing e, where the
plain step's rank g holds experts g S ... g S + S - 1. RANKS is one list
for every block, or per-block maps "BLOCK=RANKS;BLOCK=RANKS" (blocks not
named keep the plain layout), as moe-run's option takes them. This reads the step (STEP.mlir: which
parameters, and which optimizer state, are expert weights: the operands
of moe.expert) and its `moe-run --dump` files PREFIX.rankR, and writes
OUT.rankR holding what the plain step's rank R would hold: every expert
tensor's slots put back in plain order, every other value as it is.
compare_dumps.py then compares them with the plain step's dumps. The
expert-parallel group is the model's ep_axes of its grid (data-parallel
replicas over the other axes each hold the same experts).
Standard library only.

  placed_dumps_to_plain.py STEP.mlir RANKS PREFIX OUT
"""
import glob
import re
import sys


def expert_names(path):
    """The moe.param / moe.state names of the step's expert weights, each
    with its block (moe.task's on the moe.expert that reads it)."""
    text = open(path).read()
    names = {}
    for m in re.finditer(r'(%arg\d+): tensor<[^>]*>\s*\{([^}]*)\}', text):
        name = re.search(r'moe\.(?:param|state) = "([^"]+)"', m.group(2))
        if name:
            names[m.group(1)] = name.group(1)
    experts = {}
    for m in re.finditer(r'moe\.expert\s.*?up\((%arg\d+)\)'
                         r'(?:\s+gate\((%arg\d+)\))?\s+down\((%arg\d+)\)'
                         r'[^\n]*', text):
        block = re.search(r'moe\.task<[^>]*block = (\d+)', m.group(0))
        for a in m.groups():
            if a in names and (block or names[a] not in experts):
                experts[names[a]] = int(block.group(1)) if block else -1
    if not experts:
        sys.exit(f"error: {path}: no moe.expert reads a parameter")
    # Optimizer state of an expert weight ("<param>.exp_avg", ...) too.
    for n in list(names.values()):
        for e, b in list(experts.items()):
            if n.startswith(e + "."):
                experts[n] = b
    return experts


def grid_of(path):
    """The model grid's shape and its expert-parallel axes."""
    text = open(path).read()
    shape = re.search(r'shard\.grid @\w+\(shape = ([0-9x]+)\)', text)
    axes = re.search(r'ep_axes = \[([0-9, ]*)\]', text)
    if not shape or not axes:
        sys.exit(f"error: {path}: no grid or ep_axes")
    return ([int(d) for d in shape.group(1).split("x")],
            [int(a) for a in axes.group(1).split(",") if a.strip()])


def coords(shape, rank):
    c = []
    for d in reversed(shape):
        c.append(rank % d)
        rank //= d
    return c[::-1]


def rank_of(shape, c):
    r = 0
    for d, x in zip(shape, c):
        r = r * d + x
    return r


def load(path):
    values = {}
    for line in open(path):
        parts = line.split()
        values[parts[0]] = (parts[1], parts[2:])
    return values


def parse_maps(text):
    """{block: expert -> rank}; block -1: every block."""
    text = text.strip()
    if "=" not in text:
        return {-1: [int(x) for x in re.split(r"[,\s]+", text)]}
    maps = {}
    for spec in re.split(r"[;\n]+", text):
        if spec.strip():
            block, ranks = spec.split("=", 1)
            maps[int(block)] = [int(x) for x in re.split(r"[,\s]+",
                                                         ranks.strip())]
    return maps


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    step, ranks_text, prefix, out = sys.argv[1:]
    if ranks_text.startswith("@"):
        ranks_text = open(ranks_text[1:]).read()
    maps = parse_maps(ranks_text)
    files = sorted(glob.glob(prefix + ".rank*"))
    dumps = {int(p.rsplit(".rank", 1)[1]): load(p) for p in files}
    shape, ep = grid_of(step)
    G = 1
    for a in ep:
        G *= shape[a]
    if not dumps or len(dumps) % G:
        sys.exit(f"error: {len(dumps)} dump files for a {G}-rank "
                 "expert-parallel group")

    def ep_index(c):
        g = 0
        for a in ep:
            g = g * shape[a] + c[a]
        return g

    def with_ep_index(c, g):
        c = list(c)
        for a in reversed(ep):
            c[a] = g % shape[a]
            g //= shape[a]
        return c

    names = expert_names(step)
    for q in sorted(dumps):
        cq = coords(shape, q)
        lines = []
        for name, (size, data) in dumps[q].items():
            block = names.get(name)
            expert_rank = maps.get(block, maps.get(-1)) \
                if block is not None else None
            if expert_rank is not None:
                E = len(expert_rank)
                S = E // G
                held = [[e for e in range(E) if expert_rank[e] == g]
                        for g in range(G)]
                if E % G or any(len(h) != S for h in held):
                    sys.exit(f"error: block {block}: RANKS must give every "
                             f"rank {S} experts")
                per = len(data) // S
                plain = []
                gq = ep_index(cq)
                for e in range(gq * S, (gq + 1) * S):
                    g = expert_rank[e]
                    s = held[g].index(e)
                    src = rank_of(shape, with_ep_index(cq, g))
                    plain += dumps[src][name][1][s * per:(s + 1) * per]
                data = plain
            lines.append(f"{name} {size} {' '.join(data)}")
        with open(f"{out}.rank{q}", "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
