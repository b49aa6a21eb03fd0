#!/usr/bin/env python3
"""Rewrite an expert-sharded or tensor-parallel step's dumps in the plain
step's layout.

moe-expert-sharding (docs/passes/moe-expert-sharding.md) gives rank (n, j)
part j along `dim` of node n's experts; the plain step gives rank (n, i)
whole experts [i E_n/S, (i + 1) E_n/S) of them. This reads the sharded
step (STEP.mlir: the grid, each parameter's shape and moe.hidden_shard)
and its `moe-run --dump` / `--dump-inputs` files PREFIX.rankR, and writes
OUT.rankR holding what the plain step's rank R would hold: each sharded
expert weight reassembled, every other value (the loss, replicated
weights, token ids) as it is. compare_dumps.py and torch_reference.py
then read them like a plain step's dumps. moe-tensor-parallel
(docs/passes/moe-tensor-parallel.md) gives rank (n, j) part j along `dim`
of an attention weight (moe.head_shard) that the plain step replicates:
every rank of node n gets the S parts joined. Optimizer state
(NAME.exp_avg, NAME.exp_avg_sq, NAME.momentum_buffer) follows its
parameter. Standard library only.

  esp_dumps_to_plain.py STEP.mlir PREFIX OUT
"""
import glob
import re
import sys


def read_step(path):
    text = open(path).read()
    grid = re.search(r"shard\.grid @\w+\(shape = ([0-9x]+)\)", text)
    if not grid:
        sys.exit(f"error: {path}: no shard.grid")
    shape = [int(x) for x in grid.group(1).split("x")]
    model = re.search(r"intra_axes = \[([0-9, ]*)\]", text)
    if not model or [int(a) for a in model.group(1).split(",")] != [
            len(shape) - 1]:
        sys.exit(f"error: {path}: expected intra_axes = [{len(shape) - 1}]")
    sharded, heads = {}, {}
    for m in re.finditer(r"tensor<([0-9x]+)xf32>\s*\{([^}]*)\}", text):
        attrs = m.group(2)
        name = re.search(r'moe\.param = "([^"]+)"', attrs)
        dims = [int(x) for x in m.group(1).split("x")]
        for kind, into in (("hidden_shard", sharded), ("head_shard", heads)):
            shard = re.search(rf"moe\.{kind} = array<i64: (\d+), (\d+)>",
                              attrs)
            if name and shard:
                into[name.group(1)] = (dims, int(shard.group(1)),
                                       int(shard.group(2)))
    if not sharded and not heads:
        sys.exit(f"error: {path}: no parameter has moe.hidden_shard or "
                 "moe.head_shard")
    return shape, sharded, heads


# Optimizer state (moe-build-train-step: torch.optim's slot names after
# the parameter's) is laid out as its parameter is.
STATE_SUFFIXES = (".exp_avg_sq", ".exp_avg", ".momentum_buffer")


def param_of(name):
    for suffix in STATE_SUFFIXES:
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def load(path):
    """{name: (size field, values)}: the field is a count in `--dump`
    files and a shape (AxB) in `--dump-inputs` ones."""
    values = {}
    for line in open(path):
        parts = line.split()
        values[parts[0]] = (parts[1], parts[2:])
    return values


def strides(shape):
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return list(reversed(out))


def plain_part(shards, shape, dim, i, count):
    """Experts [i count, (i + 1) count) of the node's whole tensor, whose
    part j along `dim` is shards[j] (each of `shape`)."""
    S = len(shards)
    whole = list(shape)
    whole[dim] *= S
    ws, ps = strides(whole), strides(shape)
    out = []
    total = count * ws[0]
    for flat in range(i * count * ws[0], i * count * ws[0] + total):
        idx, rest = [], flat
        for s in ws:
            idx.append(rest // s)
            rest %= s
        j, idx[dim] = divmod(idx[dim], shape[dim])
        out.append(shards[j][sum(a * s for a, s in zip(idx, ps))])
    return out


def joined(parts, shape, dim):
    """The S parts (each of `shape`) joined along `dim`."""
    outer = 1
    for d in shape[:dim]:
        outer *= d
    row = len(parts[0]) // outer
    out = []
    for o in range(outer):
        for p in parts:
            out.extend(p[o * row:(o + 1) * row])
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    step, prefix, out = sys.argv[1:]
    grid, sharded, heads = read_step(step)
    S = grid[-1]
    files = sorted(glob.glob(prefix + ".rank*"))
    ranks_in_grid = 1
    for d in grid:
        ranks_in_grid *= d
    if len(files) != ranks_in_grid:
        sys.exit(f"error: {len(files)} dump files for a {grid} grid")
    ranks = {int(p.rsplit(".rank", 1)[1]): load(p) for p in files}
    for q in sorted(ranks):
        node, i = divmod(q, S)
        lines = []
        for name, (size, data) in ranks[q].items():
            owner = param_of(name)
            if owner in sharded:
                shape, dim, _ = sharded[owner]
                parts = [ranks[node * S + j][name][1] for j in range(S)]
                data = plain_part(parts, shape, dim, i, shape[0] // S)
                plain = list(shape)
                plain[0] //= S
                plain[dim] *= S
                size = ("x".join(map(str, plain)) if "x" in size
                        else str(len(data)))
            elif owner in heads:
                shape, dim, _ = heads[owner]
                data = joined([ranks[node * S + j][name][1] for j in range(S)],
                              shape, dim)
                plain = list(shape)
                plain[dim] *= S
                size = ("x".join(map(str, plain)) if "x" in size
                        else str(len(data)))
            lines.append(f"{name} {size} {' '.join(data)}")
        with open(f"{out}.rank{q}", "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
