#!/usr/bin/env python3
"""FlowMoE Theorem 1 on random instances, in the simulator.

Theorem 1 (§3.3, App. B): with the task order of Eqs. 4-5, inserting each
block's all-reduce between the all-to-alls of the backward pass is never
slower than running all all-reduces after the backward pass. For random
models, hardware profiles (the presets with compute and network speeds
scaled at random) and chunk sizes S_p, this compares the simulated
iteration time of `flowmoe` (chunks in the A2A gaps, low priority) with
`centralized-ar` (the same chunks after the backward), and fails on any
instance where flowmoe is slower. Deterministic for a given --seed.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GEN = os.path.join(HERE, "gen_model_mlir.py")
PRESETS = ["flowmoe-cluster1", "flowmoe-cluster2", "fsmoe-testbed-a",
           "fsmoe-testbed-b", "h100-node"]


def run(cmd, stdin=None):
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                       timeout=300)
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd)}:\n{p.stderr[-2000:]}")
    return p.stdout


def scaled_profile(rng, preset, directory, n):
    with open(os.path.join(ROOT, "profiles", preset + ".json")) as f:
        prof = json.load(f)
    compute, network = 10 ** rng.uniform(-1, 1), 10 ** rng.uniform(-1, 1)
    for model in prof["compute"].values():
        model["beta_us_per_flop" if "beta_us_per_flop" in model
              else "beta_us_per_byte"] *= compute
    for coll in prof["collectives"].values():
        for link in coll.values():
            link["beta_us_per_byte"] *= network
            link["alpha_us"] *= rng.uniform(0, 2)
    prof["name"] = f"{preset}-x{compute:.2g}-n{network:.2g}"
    path = os.path.join(directory, f"profile{n}.json")
    with open(path, "w") as f:
        json.dump(prof, f)
    return path


def iteration(moe_opt, model, policy, degree, chunk, profile):
    out = run([moe_opt, "-", "--moe-flowmoe-pipeline=" +
               f"degree={degree} policy={policy} chunk-bytes={chunk}",
               f"--moe-simulate=profile={profile} json=true", "-o",
               os.devnull], stdin=model)
    return json.loads(out)[0]["iteration_us"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--moe-opt", required=True)
    ap.add_argument("--instances", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    gaps = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.instances):
            layers = rng.choice([1, 2, 3, 4])
            batch = rng.choice([2, 4, 8])
            degree = rng.choice([d for d in (1, 2, 4) if batch % d == 0])
            grid = rng.choice(["1x4", "2x2", "2x4", "4x2"])
            epr = rng.choice([1, 2])
            model = run([sys.executable, GEN, "gpt-moe-2block",
                         "--layers", str(layers), "--grid", grid,
                         "--experts-per-rank", str(epr),
                         "--set", f"batch={batch}",
                         "--set", f"seq={rng.choice([16, 32, 64])}",
                         "--set", f"embed={rng.choice([64, 128])}",
                         "--set", f"hidden={rng.choice([64, 128, 256])}",
                         "--set", "head_dim=16", "--set", "vocab=256"])
            profile = scaled_profile(rng, rng.choice(PRESETS), tmp, n)
            chunk = rng.choice(["512", "4KiB", "32KiB", "256KiB", "2MiB"])
            flow = iteration(args.moe_opt, model, "flowmoe", degree, chunk,
                             profile)
            central = iteration(args.moe_opt, model, "centralized-ar",
                                degree, chunk, profile)
            if flow > central * (1 + 1e-9):
                print(f"FAIL instance {n}: flowmoe {flow:.3f} us > "
                      f"centralized {central:.3f} us (L={layers} B={batch} "
                      f"R={degree} grid={grid} S_p={chunk} {profile})")
                return 1
            gaps.append(1 - flow / central)
    print(f"theorem 1: {args.instances} random instances, flowmoe never "
          f"slower than centralized all-reduce (simulated; mean saving "
          f"{100 * sum(gaps) / len(gaps):.1f}%, max "
          f"{100 * max(gaps):.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
