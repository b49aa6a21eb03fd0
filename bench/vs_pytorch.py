#!/usr/bin/python3
"""moe-run and the generated step against a plain PyTorch step, side by side.

The same model (examples/trainer/make_model.py: the example trainer's
byte-level Mixtral-style MoE, and one with 4x larger M and H), the same
weights (the ONNX file's, which PyTorch builds from the same seed), the same
data (moe-run --data's byte windows of examples/data/moe-notes.txt), the
same ranks and learning rate, three ways:

  moe-run     the ONNX file imported (--onnx-grid 1xP), scheduled (FlowMoE
              pipeline: dropless routing with variable counts, only the
              routed rows travel and are computed; --routing padded imports
              with --moe-bound-dropless instead, capacity B*N per expert),
              run by moe-run --profile;
  generated   the same schedule compiled to C++ (moe_compile_model, the
              example trainer's CMake project), its driver with
              MOE_RT_PROFILE=1;
  pytorch     bench/torch_dp_step.py: data-parallel over gloo, all experts
              local, one all_reduce of the flattened gradients, SGD.

Each system's step time is its rank 0's wall time of a training step, at
microsecond resolution (moe-run/generated: the profile's wall_us, from
issuing the step to its streams' end; PyTorch: forward to update). Steps 1
and 2 (allocation, warm-up) are left out. Repetitions are interleaved
(every configuration and system once per round, the system order rotating)
and the medians over all kept steps of all rounds are compared. Step 1's
loss of each system is printed too: the three must agree (same model,
weights and data). OMP/OpenBLAS threads = 1 everywhere.

  bench/vs_pytorch.py [--build build] [--ranks 1,2,4] [--rounds 3]
                      [--steps 12] [--models trainer,trainer-4x]
                      [--routing variable|padded]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
DATA = os.path.join(ROOT, "examples", "data", "moe-notes.txt")
PIPELINE = "degree=2 policy=flowmoe chunk-bytes=64KiB lr=0.2"
LR = 0.2
MODELS = {"trainer": (64, 128), "trainer-4x": (256, 512)}
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe",
          "-x", "OMP_NUM_THREADS", "-x", "OPENBLAS_NUM_THREADS"]


def run(cmd, **kw):
    r = subprocess.run(cmd, env=kw.pop("env", ENV), capture_output=True,
                       text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"vs_pytorch: failed ({r.returncode}): {' '.join(cmd)}\n"
                 f"{r.stdout[-2000:]}{r.stderr[-3000:]}")
    return r


def prepare(build, work, model, ranks, routing):
    """The ONNX file, moe-run's step and the generated trainer of one
    configuration; returns the commands that run them."""
    m, h = MODELS[model]
    d = os.path.join(work, f"{model}-p{ranks}-{routing}")
    os.makedirs(d, exist_ok=True)
    onnx = os.path.join(d, "byte-moe.onnx")
    if not os.path.exists(onnx):
        run([PYTHON, os.path.join(ROOT, "examples/trainer/make_model.py"),
             "-o", onnx, "--m", str(m), "--h", str(h)])
    moe_opt = os.path.join(build, "bin", "moe-opt")
    imported, step = os.path.join(d, "byte-moe.mlir"), os.path.join(d, "step.mlir")
    bound = ["--moe-bound-dropless"] if routing == "padded" else []
    run([moe_opt, onnx, f"--onnx-grid=1x{ranks}"] + bound + ["-o", imported])
    run([moe_opt, imported, f"--moe-flowmoe-pipeline={PIPELINE}", "-o", step])
    gen = os.path.join(d, "generated")
    cuda = "ON" if os.path.exists(
        os.path.join(build, "lib", "libmoe_runtime_cuda.so")) else "OFF"
    run(["cmake", "-G", "Ninja", "-S", os.path.join(ROOT, "examples/trainer"),
         "-B", gen, "-DCMAKE_BUILD_TYPE=Release", f"-DMOE_SOURCE_DIR={ROOT}",
         f"-DMOE_BUILD_DIR={os.path.abspath(build)}",
         f"-DMOE_RUNTIME_CUDA={cuda}", f"-DMOE_TRAINER_MODEL={imported}",
         f"-DMOE_TRAINER_PIPELINE={PIPELINE}"])
    run(["cmake", "--build", gen, "-j", "2"])
    return {
        "moe-run": [os.path.join(build, "bin", "moe-run"), step, "--data", DATA,
                    "--profile", "--timeout", "300"],
        "generated": [os.path.join(gen, "byte_moe-trainer"), "--data", DATA,
                      "--params", os.path.join(gen, "byte_moe.moe",
                                               "byte_moe.params"),
                      "--timeout", "300"],
        "pytorch": [PYTHON, os.path.join(ROOT, "bench", "torch_dp_step.py"),
                    "--m", str(m), "--h", str(h), "--data", DATA,
                    "--lr", str(LR)],
    }


PROFILE_WALL = re.compile(r"^profile rank 0 step (\d+) wall_us (\d+)$", re.M)
TORCH_US = re.compile(r"^step (\d+) us (\d+)$", re.M)
LOSS1 = re.compile(r"^step 1 loss (\S+)$", re.M)


def measure(system, cmd, ranks, steps):
    """Step times (us) of steps 3..steps on rank 0, and step 1's loss."""
    env = dict(ENV)
    mpirun = list(MPIRUN)
    if system == "generated":
        env["MOE_RT_PROFILE"] = "1"
        mpirun += ["-x", "MOE_RT_PROFILE"]
    r = run(mpirun + ["-np", str(ranks)] + cmd + ["--steps", str(steps)],
            env=env, timeout=900)
    pattern = TORCH_US if system == "pytorch" else PROFILE_WALL
    text = r.stdout if system == "pytorch" else r.stderr
    times = [int(us) for s, us in pattern.findall(text) if int(s) >= 3]
    loss = LOSS1.search(r.stdout)
    if len(times) != steps - 2 or not loss:
        sys.exit(f"vs_pytorch: no step times from {system}:\n{r.stdout[-1500:]}"
                 f"{r.stderr[-1500:]}")
    return times, loss.group(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", help="scratch directory (default BUILD/bench/vs_pytorch)")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--models", default="trainer,trainer-4x")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--routing", choices=["variable", "padded"],
                    default="variable",
                    help="dropless routing: variable counts (default) or "
                         "padded to the bound B*N (--moe-bound-dropless)")
    args = ap.parse_args()
    if args.steps < 3:
        ap.error("--steps must be at least 3 (steps 1 and 2 are warm-up)")
    work = args.work or os.path.join(args.build, "bench", "vs_pytorch")
    configs = [(model, int(p)) for model in args.models.split(",")
               for p in args.ranks.split(",")]
    for model, _ in configs:
        if model not in MODELS:
            ap.error(f"unknown model '{model}' (one of {', '.join(MODELS)})")
    commands = {}
    for c in configs:
        print(f"preparing {c[0]} on {c[1]} rank(s)", file=sys.stderr, flush=True)
        commands[c] = prepare(args.build, work, *c, args.routing)
    systems = ["pytorch", "moe-run", "generated"]
    times = {(c, s): [] for c in configs for s in systems}
    losses = {}
    for rnd in range(args.rounds):
        order = systems[rnd % 3:] + systems[:rnd % 3]
        for c in configs:
            for s in order:
                t, loss = measure(s, commands[c][s], c[1], args.steps)
                times[(c, s)] += t
                losses[(c, s)] = loss
            print(f"round {rnd + 1}/{args.rounds}: {c[0]} P={c[1]} done",
                  file=sys.stderr, flush=True)
    print(f"# median step time (ms, rank 0, steps 3..{args.steps} of "
          f"{args.rounds} interleaved rounds); ratio = ours / PyTorch "
          f"(< 1: faster than PyTorch); routing {args.routing}")
    print(f"{'model':<11} {'P':>2} {'pytorch':>8} {'moe-run':>8} "
          f"{'generated':>9} {'run/pt':>7} {'gen/pt':>7} {'gen/run':>7}  "
          "step-1 loss (pt, run, gen)")
    for c in configs:
        med = {s: statistics.median(times[(c, s)]) / 1000 for s in systems}
        print(f"{c[0]:<11} {c[1]:>2} {med['pytorch']:>8.2f} "
              f"{med['moe-run']:>8.2f} {med['generated']:>9.2f} "
              f"{med['moe-run'] / med['pytorch']:>7.2f} "
              f"{med['generated'] / med['pytorch']:>7.2f} "
              f"{med['generated'] / med['moe-run']:>7.2f}  "
              f"{losses[(c, 'pytorch')]} {losses[(c, 'moe-run')]} "
              f"{losses[(c, 'generated')]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
