#!/usr/bin/env python3
"""Mutation fuzzer for moe-opt's parsers and verifiers.

Takes seed .mlir files, applies random structural mutations (integers set to
0, -1, huge values; lines dropped, duplicated or truncated; keywords and
types swapped; bytes flipped) and runs moe-opt on each mutant. moe-opt may
accept or reject a mutant, but it must exit normally (0 or 1) within the
time limit: a signal (crash, assertion) or a hang fails the run, and the
mutant is saved for reproduction. Deterministic for a given --seed.

  fuzz_moe_opt.py --moe-opt build/bin/moe-opt --iterations 300 examples/*.mlir
"""
import argparse
import os
import random
import re
import subprocess
import sys

INTS = ["0", "-1", "1", "3", "7", "65536", "9223372036854775807",
        "-9223372036854775808", "4294967296"]
KEYWORDS = ["softmax_topk", "noisy_topk", "sigmoid", "cosine",
            "expert_choice", "relu", "gelu", "silu", "layer", "rms", "comm",
            "compute", "dropless", "causal", "rotary", "normalize", "prenorm",
            "capacity", "experts", "top_k", "axes", "bytes", "aux", "gate",
            "up", "down", "on", "weights", "heads", "kv_heads", "head_dim"]
OPS = ["moe.attention", "moe.gate", "moe.dispatch", "moe.expert",
       "moe.combine", "moe.all_reduce", "moe.block", "moe.yield", "moe.norm",
       "moe.linear", "moe.embedding", "moe.cross_entropy", "moe.split",
       "moe.merge", "moe.shared_expert", "moe.record_event",
       "moe.wait_event"]
TYPES = ["f32", "f16", "i32", "i64", "index", "!moe.event"]


def mutate(text, rng):
    kind = rng.randrange(9)
    if kind == 0:  # an integer literal becomes an edge value
        nums = list(re.finditer(r"(?<![\w.%#@])-?\d+(?![\w.])", text))
        if nums:
            m = rng.choice(nums)
            return text[:m.start()] + rng.choice(INTS) + text[m.end():]
    if kind == 1:  # drop a line
        lines = text.split("\n")
        del lines[rng.randrange(len(lines))]
        return "\n".join(lines)
    if kind == 2:  # duplicate a line
        lines = text.split("\n")
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        return "\n".join(lines)
    if kind == 3:  # truncate
        return text[:rng.randrange(len(text) + 1)]
    if kind == 4:  # swap a keyword
        hits = [m for k in KEYWORDS for m in re.finditer(r"\b%s\b" % k, text)]
        if hits:
            m = rng.choice(hits)
            return text[:m.start()] + rng.choice(KEYWORDS) + text[m.end():]
    if kind == 5:  # swap an op name
        hits = [m for k in OPS for m in re.finditer(re.escape(k) + r"\b", text)]
        if hits:
            m = rng.choice(hits)
            return text[:m.start()] + rng.choice(OPS) + text[m.end():]
    if kind == 6:  # swap an element type
        hits = list(re.finditer(r"x(f32|i32|i64)>", text))
        if hits:
            m = rng.choice(hits)
            return text[:m.start()] + "x" + rng.choice(TYPES) + ">" + text[m.end():]
    if kind == 7:  # flip a byte
        if text:
            i = rng.randrange(len(text))
            return text[:i] + chr(rng.randrange(32, 127)) + text[i + 1:]
    # a dimension becomes dynamic or zero
    hits = list(re.finditer(r"(?<=[<x])\d+(?=x)", text))
    if hits:
        m = rng.choice(hits)
        return text[:m.start()] + rng.choice(["?", "0", "1"]) + text[m.end():]
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("seeds", nargs="+")
    ap.add_argument("--moe-opt", required=True)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--extra-args", default="",
                    help="extra moe-opt arguments, e.g. a pass")
    ap.add_argument("--crash-dir", default=".")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    seeds = [open(p).read() for p in args.seeds]
    accepted = rejected = 0
    for i in range(args.iterations):
        text = rng.choice(seeds)
        for _ in range(rng.randrange(1, 4)):
            text = mutate(text, rng)
        cmd = [args.moe_opt, "-", "-o", os.devnull] + args.extra_args.split()
        try:
            proc = subprocess.run(cmd, input=text.encode("utf-8", "replace"),
                                  capture_output=True, timeout=args.timeout)
            bad = proc.returncode not in (0, 1)
            why = f"exit code {proc.returncode}"
        except subprocess.TimeoutExpired:
            bad, why, proc = True, f"no exit within {args.timeout} s", None
        if bad:
            path = os.path.join(args.crash_dir, f"fuzz-crash-{i}.mlir")
            with open(path, "w") as f:
                f.write(text)
            err = proc.stderr.decode(errors="replace")[-2000:] if proc else ""
            print(f"FAIL iteration {i}: {why}; mutant saved to {path}\n{err}")
            return 1
        if proc.returncode == 0:
            accepted += 1
        else:
            rejected += 1
    print(f"fuzz: {args.iterations} mutants, {accepted} accepted, "
          f"{rejected} rejected with an error, 0 crashes or hangs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
