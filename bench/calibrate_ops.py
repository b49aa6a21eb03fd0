#!/usr/bin/env python3
"""Measures how far the runtime's own kernels are from the GEMM / memory
rates of a profile, per op class, and writes them into the profile as
`op_scale` (docs/profile-format.md).

The cost model times an op from its flops (GEMM rate) or its bytes (memory
rate), which moe-profile measures with OpenBLAS SGEMM and memcpy. The CPU
runtime's kernels are not all that fast: attention runs scalar loops, the
loss a per-token pass. So the model is run for real on one rank (no
communication: what is measured is compute only) with `moe-run --profile`,
each op class's measured time (median over steps, the first 2 dropped) is
divided by what the cost model charges the same class's tasks on the
same profile (moe-opt --moe-simulate --moe-trace, launch cost excluded),
and that ratio is the class's scale. It is a property of the runtime's
kernel on this machine and this model's shapes, measured once and applied
to every policy -- not fitted per policy.

With --copies N, N copies of the one-rank step run at once and their
classes are averaged: an emulated cluster places its N ranks on this
machine, where they share its cores, caches and memory bandwidth (the
attention's forward on `large` takes 6 ms alone, 8-11 ms beside a second
copy), and a kernel timed alone would be faster than in the step.

    python3 bench/calibrate_ops.py --build build --model STEP_1RANK.mlir \\
        --profile measured.json -o calibrated.json [--steps 8] [--data FILE]
        [--copies N]

STEP_1RANK.mlir: the model scheduled vanilla for a 1 x 1 grid.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

# Classes whose modelled time per step is below this are left at 1: their
# ratio is noise (a few microseconds measured against a fraction of one).
MIN_MODELLED_US = 5.0


def measured_classes(moe_run, step, steps, data, env, copies=1):
    """Per op class: the median over steps (after 2) of its measured us,
    averaged over `copies` runs made at the same time (one per rank the
    cluster places on this machine: they share its cores, caches and
    memory bandwidth as the ranks of a step do)."""
    cmd = [moe_run, step, "--steps", str(steps), "--profile"]
    if data:
        cmd += ["--data", data]
    runs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env) for _ in range(copies)]
    outputs = [(p, *p.communicate(timeout=600)) for p in runs]
    pat = re.compile(r"^profile rank 0 step (\d+) op (\S+) tasks \d+ us (\d+)")
    per_copy = []
    for p, _, err in outputs:
        if p.returncode:
            sys.exit(f"error: {' '.join(cmd)} exited {p.returncode}:\n"
                     f"{err[-2000:]}")
        per_step = collections.defaultdict(dict)
        for line in err.splitlines():
            m = pat.match(line)
            if m and int(m.group(1)) >= 2:
                per_step[m.group(2)][int(m.group(1))] = float(m.group(3))
        if not per_step:
            sys.exit(f"error: {' '.join(cmd)} printed no profile lines for "
                     f"steps >= 2 (--steps {steps} too few?)")
        med = {}
        for cls, by_step in per_step.items():
            v = sorted(by_step.values())
            med[cls] = v[len(v) // 2]
        per_copy.append(med)
    classes = set().union(*per_copy)
    return {cls: sum(m.get(cls, 0.0) for m in per_copy) / copies
            for cls in classes}


def modelled_classes(moe_opt, step, profile, tmp):
    """Per op class: the cost model's compute time (us) for the class's
    tasks, launch cost excluded; and the set of communication classes."""
    trace = os.path.join(tmp, "calibrate.trace.json")
    p = subprocess.run([moe_opt, step, f"--moe-simulate=profile={profile}",
                        f"--moe-trace={trace}", "-o", os.devnull],
                       capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"error: moe-opt --moe-simulate on {step}:\n{p.stderr[-2000:]}")
    with open(profile) as f:
        launch = json.load(f)["launch_us"]
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    compute = collections.defaultdict(float)
    comm = set()
    for e in events:
        if e.get("ph") != "X" or e.get("pid") != 0:
            continue
        cls = e["args"]["class"]
        if e.get("cat") == "compute":
            compute[cls] += max(0.0, e["dur"] - launch)
        else:
            comm.add(cls)
    return compute, comm


def calibrate(moe_run, moe_opt, step, profile, out, steps=8, data=None,
              log=None, copies=1):
    """Writes `profile` plus the measured op_scale to `out`; returns the
    scales {class: (measured us, modelled us, scale)}. `copies`: how many
    copies of the one-rank step run at once (measured_classes)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    with open(profile) as f:
        prof = json.load(f)
    # The cost model's own, unstretched times: no scale from an earlier
    # calibration, no contention.
    prof.pop("op_scale", None)
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base.json")
        with open(base, "w") as f:
            json.dump({k: v for k, v in prof.items()
                       if k not in ("comm_cpu_share", "comm_stretch")}, f)
        measured = measured_classes(moe_run, step, steps, data, env, copies)
        modelled, comm = modelled_classes(moe_opt, step, base, tmp)
    rows, scales = {}, {}
    for cls, model_us in sorted(modelled.items()):
        # A class measured at 0 us (below the profiler's 1 us) keeps 1.
        if (cls in comm or model_us < MIN_MODELLED_US or
                measured.get(cls, 0) <= 0):
            continue
        scales[cls] = measured[cls] / model_us
        rows[cls] = (measured[cls], model_us, scales[cls])
    prof["op_scale"] = scales
    with open(out, "w") as f:
        json.dump(prof, f, indent=2)
    if log:
        log(f"| op class | measured us (1 rank, {copies} at once) | "
            "modelled us | scale |")
        log("|---|---|---|---|")
        for cls, (m, s, k) in sorted(rows.items(), key=lambda r: -r[1][0]):
            log(f"| {cls} | {m:.0f} | {s:.0f} | {k:.2f} |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", required=True,
                    help="the model scheduled for one rank (grid 1x1)")
    ap.add_argument("--profile", required=True)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--data")
    ap.add_argument("--copies", type=int, default=1,
                    help="copies of the step run at once: the ranks the "
                         "cluster places on this machine (default 1)")
    args = ap.parse_args()
    if args.steps < 4:
        ap.error("--steps must be at least 4 (the first 2 are warm-up)")
    if args.copies < 1:
        ap.error("--copies must be at least 1")
    calibrate(os.path.join(args.build, "bin", "moe-run"),
              os.path.join(args.build, "bin", "moe-opt"), args.model,
              args.profile, args.output, args.steps, args.data, log=print,
              copies=args.copies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
