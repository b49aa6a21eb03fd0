#!/usr/bin/env python3
"""Property test of the scheduling passes on random small models.

For random models (blocks, grid, experts per rank, k, batch) it runs
moe-flowmoe-pipeline with every policy — vanilla at R = 1, the others at a
random R — and checks that
  * the pipeline succeeds, which includes moe-verify-schedule (every task
    on a stream, every cross-stream use waited for, collectives ordered);
  * every policy contains the same compute work as vanilla: for each
    forward op kind and phase, the same total of tokens x features over
    its first operand, and the same all-to-all and all-reduce volumes;
  * every policy issues the forward and backward tasks of every block.
Models are chosen so that micro-batches split capacity exactly
(f*k*B*N/E divisible by R), so work must match exactly. Deterministic for
a given --seed.
"""
import argparse
import os
import random
import re
import subprocess
import sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "gen_model_mlir.py")
POLICIES = ["vanilla", "pipe-moe", "flowmoe-at", "flowmoe", "centralized-ar"]
TYPE = re.compile(r"tensor<([0-9x?]*?)x?([a-z]+[0-9]+)>")


def numel(dims):
    n = 1
    for d in dims.split("x"):
        if d:
            n *= int(d)
    return n


def first_operand_elems(line):
    """Elements of the first operand type in an op's functional type."""
    sig = line.rsplit(" : (", 1)
    if len(sig) < 2:
        sig = line.rsplit(" : ", 1)
    m = TYPE.search(sig[-1])
    return numel(m.group(1)) if m else 0


def work(ir):
    """Counter of (phase, op) -> elements, plus collective volumes."""
    total = Counter()
    lines = ir.splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        m = re.match(r"(?:%\S+(?:, %\S+)* = )?(moe\.[a-z_]+|arith\.addf)\b", s)
        if not m:
            continue
        op = m.group(1)
        if op in ("moe.vjp", "moe.yield", "moe.record_event",
                  "moe.wait_event", "moe.sgd", "moe.split", "moe.merge"):
            continue
        inside_vjp = i > 0 and "moe.vjp" in lines[i - 1]
        if op == "arith.addf":
            continue  # accumulation counts differ with R by design
        phase = "bwd" if inside_vjp else "fwd"
        if op == "moe.all_reduce":
            if inside_vjp:
                continue
            types = s.rsplit(" : ", 1)[-1]
            m2 = re.search(r"bytes \[(\d+), (\d+)\]", s)
            if m2:
                total[("ar-bytes", "")] += int(m2.group(2))
            else:
                total[("ar-bytes", "")] += sum(
                    numel(d) * 4 for d, _ in TYPE.findall(types))
            continue
        total[(phase, op)] += first_operand_elems(s)
    return total


def run(cmd, stdin=None):
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def random_model(rng):
    while True:
        layers = rng.choice([1, 2, 3])
        grid = rng.choice(["1x2", "2x2", "1x4"])
        ranks = eval(grid.replace("x", "*"))
        epr = rng.choice([1, 2])
        experts = epr * ranks
        k = rng.choice([1, 2])
        batch = rng.choice([2, 4, 8])
        seq = rng.choice([8, 16])
        r = rng.choice([d for d in (2, 4, 8) if batch % d == 0])
        # capacity f*k*B*N/E (f = 1) must split exactly into R parts
        if (k * batch * seq) % (experts * r) == 0 and k <= experts:
            return dict(layers=layers, grid=grid, epr=epr, k=k, batch=batch,
                        seq=seq, r=r)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--moe-opt", required=True)
    ap.add_argument("--models", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    checked = 0
    for n in range(args.models):
        m = random_model(rng)
        model = run([sys.executable, GEN, "gpt-moe-2block",
                     "--layers", str(m["layers"]), "--grid", m["grid"],
                     "--experts-per-rank", str(m["epr"]),
                     "--set", f"top_k={m['k']}", "--set", f"batch={m['batch']}",
                     "--set", f"seq={m['seq']}", "--set", "embed=32",
                     "--set", "hidden=64", "--set", "head_dim=16",
                     "--set", "vocab=64", "--capacity-factor", "1.0"])
        base = None
        for policy in POLICIES:
            degree = 1 if policy == "vanilla" else m["r"]
            chunk = rng.choice(["256", "1KiB", "4KiB", "1MiB"])
            out = run([args.moe_opt, "-", "--moe-flowmoe-pipeline=" +
                       f"degree={degree} policy={policy} chunk-bytes={chunk}",
                       "--moe-print-schedule=output=-"], stdin=model)
            w = work(out)
            for l in range(1, m["layers"] + 1):
                for task in (f"D_1^{l}", f"C_1^{l}'", f"AT_1^{l}'"):
                    if task not in out:
                        print(f"FAIL model {n} {m} policy {policy}: no {task}")
                        return 1
            if base is None:
                base = w
            elif w != base:
                diff = {key: (base.get(key), w.get(key))
                        for key in set(base) | set(w)
                        if base.get(key) != w.get(key)}
                print(f"FAIL model {n} {m} policy {policy} R={degree}: "
                      f"work differs from vanilla: {diff}")
                return 1
            checked += 1
    print(f"schedule properties: {args.models} random models x "
          f"{len(POLICIES)} policies = {checked} schedules verified, "
          f"same work as vanilla")
    return 0


if __name__ == "__main__":
    sys.exit(main())
