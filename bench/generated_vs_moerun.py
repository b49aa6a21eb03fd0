#!/usr/bin/python3
"""The generated C++ step against moe-run on the codegen tests' models.

The models and schedules of test/Conversion/codegen-*.test (gen_model_mlir.py
gpt-moe-2block / mixtral-style-2block, seq 16, 1 x 2 grid, 4 experts per
rank; padded capacity 4.0 or dropless with variable counts), each scheduled
by moe-flowmoe-pipeline and compiled with the tests' own CMake project
(test/Conversion/Inputs/e2e: moe_compile_model + the example driver). Both
run the same inputs (moe-run --dump-inputs, read by the driver) on 2 ranks.

A step time is rank 0's wall time of one step in microseconds, from the
runtime's profile (moe-run --profile, the driver with MOE_RT_PROFILE=1);
steps 1 and 2 are left out. Rounds are interleaved (each configuration's
two systems once per round, their order alternating) and the medians over
all kept steps of all rounds are compared. OMP/OpenBLAS threads = 1.

  bench/generated_vs_moerun.py [--build build] [--rounds 4] [--steps 20]
                               [--configs d2:flowmoe:2,m2:vanilla:1,...]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
# The codegen tests' models (gen_model_mlir.py arguments).
MODELS = {
    "m2": ["gpt-moe-2block", "--capacity-factor", "4.0", "--set", "seq=16",
           "--grid", "1x2", "--experts-per-rank", "4"],
    "d2": ["gpt-moe-2block", "--capacity-factor", "dropless", "--set",
           "seq=16", "--grid", "1x2", "--experts-per-rank", "4"],
    "mx2": ["mixtral-style-2block", "--capacity-factor", "4.0", "--grid",
            "1x2", "--experts-per-rank", "4"],
}
CONFIGS = "d2:flowmoe:2,d2:vanilla:1,m2:vanilla:1,m2:flowmoe:2,mx2:flowmoe:2"
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
           MOE_RT_PROFILE="1")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-x",
          "OMP_NUM_THREADS", "-x", "OPENBLAS_NUM_THREADS", "-x",
          "MOE_RT_PROFILE", "-np", "2"]
PROFILE_WALL = re.compile(r"^profile rank 0 step (\d+) wall_us (\d+)$", re.M)


def run(cmd, **kw):
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"generated_vs_moerun: failed ({r.returncode}): "
                 f"{' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-3000:]}")
    return r


def prepare(build, work, configs):
    """Models, moe-run's steps and the generated drivers; returns the two
    commands of each configuration."""
    os.makedirs(work, exist_ok=True)
    moe_opt = os.path.join(build, "bin", "moe-opt")
    for model in {c[0] for c in configs}:
        with open(os.path.join(work, f"{model}.mlir"), "w") as f:
            f.write(run([PYTHON, os.path.join(ROOT, "python/gen_model_mlir.py")]
                        + MODELS[model]).stdout)
    cuda = "ON" if os.path.exists(
        os.path.join(build, "lib", "libmoe_runtime_cuda.so")) else "OFF"
    gen = os.path.join(work, "generated")
    run(["cmake", "-G", "Ninja", "-S",
         os.path.join(ROOT, "test/Conversion/Inputs/e2e"), "-B", gen,
         "-DCMAKE_BUILD_TYPE=Release", f"-DMOE_SOURCE_DIR={ROOT}",
         "-DMOE_RUNTIME_LIBRARY=" + os.path.join(build, "runtime",
                                                 "libmoe_runtime.a"),
         f"-DMOE_RUNTIME_CUDA={cuda}", f"-DMOE_OPT_EXECUTABLE={moe_opt}",
         f"-DMOE_E2E_MODEL_DIR={work}",
         "-DMOE_E2E_CONFIGS=" + ";".join(":".join(c) for c in configs)])
    run(["cmake", "--build", gen, "-j", "2"])
    commands = {}
    for model, policy, degree in configs:
        name = f"{model}_{policy}_{degree}".replace("-", "_")
        step = os.path.join(work, f"{name}.mlir")
        run([moe_opt, os.path.join(work, f"{model}.mlir"),
             f"--moe-flowmoe-pipeline=degree={degree} policy={policy} "
             "chunk-bytes=16KiB lr=1.0", "-o", step])
        inputs = os.path.join(work, f"{name}.in")
        run(MPIRUN + [os.path.join(build, "bin", "moe-run"), step,
                      "--dump-inputs", inputs, "--steps", "1"])
        commands[(model, policy, degree)] = {
            "moe-run": [os.path.join(build, "bin", "moe-run"), step,
                        "--profile"],
            "generated": [os.path.join(gen, f"step_{name}-driver"),
                          "--inputs", inputs],
        }
    return commands


def measure(cmd, steps):
    r = run(MPIRUN + cmd + ["--steps", str(steps), "--timeout", "120"],
            timeout=600)
    times = [int(us) for s, us in PROFILE_WALL.findall(r.stderr)
             if int(s) >= 3]
    if len(times) != steps - 2:
        sys.exit(f"generated_vs_moerun: no step times from {cmd[0]}:\n"
                 f"{r.stderr[-1500:]}")
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", help="scratch directory (default "
                    "BUILD/bench/generated_vs_moerun)")
    ap.add_argument("--configs", default=CONFIGS)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    if args.steps < 3:
        ap.error("--steps must be at least 3 (steps 1 and 2 are warm-up)")
    configs = [tuple(c.split(":")) for c in args.configs.split(",")]
    for c in configs:
        if len(c) != 3 or c[0] not in MODELS:
            ap.error(f"bad configuration {':'.join(c)} (model:policy:degree, "
                     f"model one of {', '.join(MODELS)})")
    work = args.work or os.path.join(args.build, "bench",
                                     "generated_vs_moerun")
    commands = prepare(args.build, work, configs)
    systems = ["moe-run", "generated"]
    times = {(c, s): [] for c in configs for s in systems}
    for rnd in range(args.rounds):
        for c in configs:
            for s in (systems if rnd % 2 == 0 else systems[::-1]):
                times[(c, s)] += measure(commands[c][s], args.steps)
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr,
              flush=True)
    print(f"# median step time (ms, rank 0 of 2, steps 3..{args.steps} of "
          f"{args.rounds} interleaved rounds); gen/run < 1: generated faster")
    print(f"{'config':<18} {'moe-run':>8} {'generated':>9} {'gen/run':>7}")
    for c in configs:
        med = {s: statistics.median(times[(c, s)]) / 1000 for s in systems}
        print(f"{':'.join(c):<18} {med['moe-run']:>8.2f} "
              f"{med['generated']:>9.2f} "
              f"{med['generated'] / med['moe-run']:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
