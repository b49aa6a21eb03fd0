#!/usr/bin/env python3
"""Every scheduling policy measured on an emulated multi-node cluster, next
to the simulator's prediction for it and a plain PyTorch peer
(docs/measured-policies.md).

For each model (the example trainer, the shipped example models, and a
model large enough for the overlap to matter) and each policy of POLICIES,
in one run:

- MEASURED step time: `moe-run STEP --steps N` on the emulated cluster
  (scripts/emulated-cluster.sh: network namespaces as nodes, tbf-limited
  NICs), timed from its loss lines (the first steps dropped as warm-up),
  the median over the steps of a run, then the median over --repeats runs;
  the runs of all policies and the peer are interleaved, and their order
  rotates every round, so that drift in the machine's load hits each
  policy alike;
- the measured speedup over vanilla;
- SIMULATED: `moe-opt --moe-simulate` on the profile moe-profile measured
  on the same cluster at the start of the run (with its comm_cpu_share
  and comm_stretch: how compute and communication share a rank's core),
  plus the model's op_scale (bench/calibrate_ops.py, one rank), on the
  routing each timed step had (a routing trace of the policy's twin with
  routing-stats=1), its error against the measurement, and the simulated
  lower bound max(compute, communication); beside it the prediction with
  uniform routing and with the alpha-beta rates only;
- the PyTorch peer (python/torch_moe_peer.py: DP + EP over
  torch.distributed gloo, as a user writes it) on the same cluster, ranks,
  weights and data, and whether its loss lines equal moe-run's.

Every policy's loss lines must equal vanilla's (scheduling never changes
numerics); the bench says so, or says which differ.

  python3 bench/measured_policies.py [--build build] [--models trainer,large]
      [--steps 10] [--repeats 5] [--ranks-per-node 1] [--rate 400mbit]
      [--cluster NAME] [--markdown FILE]

Needs root (network namespaces); run it on a quiet machine: every figure
is a wall-clock time on shared CPUs (docs/measured-policies.md says what
"quiet" took on a machine with sched_autogroup).
"""
import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

import calibrate_ops
import cluster_lib as cl


@dataclass(frozen=True)
class Policy:
    """A schedule: its name and the moe-opt arguments that produce it from
    the model. {chunk}, {profile} and {lr} are filled in."""
    name: str
    args: tuple


PIPELINE = "--moe-flowmoe-pipeline=degree={r} policy={p} {extra}lr={{lr}}"


def flowmoe_family(name, r, policy, extra=""):
    return Policy(name, (PIPELINE.format(r=r, p=policy, extra=extra),))


# The policies compared, vanilla first (the speedups' base). A new policy
# (FSMoE, NetMoE, FlexMoE, Pro-Prophet as their passes land) is one more
# entry: its name and the moe-opt arguments that schedule the model.
POLICIES = [
    flowmoe_family("vanilla", 1, "vanilla"),
    flowmoe_family("pipe-moe", 2, "pipe-moe"),
    flowmoe_family("flowmoe-at", 2, "flowmoe-at"),
    flowmoe_family("flowmoe S_p={chunk}", 2, "flowmoe", "chunk-bytes={chunk} "),
    flowmoe_family("flowmoe S_p=auto", 2, "flowmoe",
                   "chunk-bytes=auto profile={profile} "),
    # FSMoE's per-layer plan on the measured profile, without its expert
    # sharding (ESP needs ranks that share a node; 2 x 1 has none). On the
    # dropless models its token chunks cut the variable-count exchange
    # (`part [j, r]`: a run of each expert's rows per chunk).
    flowmoe_family("fsmoe (no ESP)", 1, "fsmoe", "profile={profile} "),
    # The same without the one counts exchange per layer: every chunk
    # all-gathers its own counts (docs/variable-dropless.md), for the A/B.
    flowmoe_family("fsmoe (no ESP) counts per chunk", 1, "fsmoe",
                   "profile={profile} shared-counts=false "),
    # NetMoE's sample placement under FlowMoE's schedule.
    flowmoe_family("netmoe + flowmoe S_p={chunk}", 2, "flowmoe",
                   "netmoe=1 chunk-bytes={chunk} "),
]


@dataclass(frozen=True)
class Model:
    """A benchmark model. `spec` is gen_model_mlir.py's preset and
    overrides, which the peer reads too (for the ONNX trainer: the preset
    that describes it); `onnx` models are exported by make_model.py and
    imported with their weights. `text` trains on examples/data (byte
    windows), otherwise on moe-run's seeded token ids."""
    name: str
    spec: tuple
    onnx: bool = False
    text: bool = True
    note: str = ""


# 8 experts, top-2 everywhere; E/P follows the cluster's rank count.
MODELS = [
    Model("trainer", ("mixtral-style-2block", "--set", "vocab=256",
                      "--set", "batch=4", "--set", "seq=64"), onnx=True,
          note="examples/trainer (ONNX, dropless)"),
    Model("mixtral-style-2block", ("mixtral-style-2block", "--set", "vocab=256"),
          note="examples/mixtral-style-2block.mlir, vocab 256 (dropless)"),
    Model("gpt-moe-2block", ("gpt-moe-2block", "--set", "vocab=256"), text=False,
          note="examples/gpt-moe-2block.mlir, vocab 256 (f = 1.2)"),
    Model("large", ("mixtral-style-2block", "--set", "vocab=256", "--set", "batch=8",
                    "--set", "seq=64", "--set", "embed=256", "--set", "hidden=256",
                    "--set", "head_dim=32"),
          note="Mixtral-style, B=8 N=64 M=H=256 (dropless): compute "
               "and communication comparable at ~300 Mbit/s (1 Gbit/s "
               "padded)"),
]

EXPERTS = 8


@dataclass
class Row:
    label: str
    step: str = ""
    sim: dict = field(default_factory=dict)      # the full model
    uniform: dict = field(default_factory=dict)  # ... with uniform routing
    plain: dict = field(default_factory=dict)    # alpha-beta rates only
    stats_step: str = ""  # the same schedule with routing statistics
    runs: list = field(default_factory=list)   # per-run median step (s)
    losses: list = field(default_factory=list)
    note: str = ""


class Bench:
    def __init__(self, args, cluster, tmp):
        self.args, self.cluster, self.tmp = args, cluster, tmp
        self.moe_opt = os.path.join(args.build, "bin", "moe-opt")
        self.moe_run = os.path.join(args.build, "bin", "moe-run")
        # Dropless models: variable-count exchanges of the routed tokens
        # only (the pipeline's moe-variable-dropless), or --dropless padded:
        # every expert padded to C = B*N slots (--moe-bound-dropless).
        self.bound = (["--moe-bound-dropless"] if args.dropless == "padded"
                      else [])

    def spec(self, model, grid=None, ranks=None):
        """The model's generator / peer arguments for this cluster (or for
        `grid` of `ranks` ranks)."""
        return [*model.spec, "--grid", grid or self.cluster.grid,
                "--experts-per-rank", str(EXPERTS // (ranks or self.cluster.ranks))]

    def build(self, model, grid=None, ranks=None, name="model"):
        out = os.path.join(self.tmp, model.name)
        os.makedirs(out, exist_ok=True)
        mlir = os.path.join(out, f"{name}.mlir")
        if model.onnx:
            onnx = os.path.join(out, "byte-moe.onnx")
            if not os.path.exists(onnx):
                cl.run([cl.SYSTEM_PYTHON, cl.MAKE_TRAINER, "-o", onnx])
            cl.run([self.moe_opt, onnx, f"--onnx-grid={grid or self.cluster.grid}",
                    *self.bound, "-o", mlir])
        else:
            gen = cl.run([sys.executable, cl.GEN, *self.spec(model, grid, ranks)])
            cl.run([self.moe_opt, "-", *self.bound, "-o", mlir], stdin=gen)
        return out, mlir

    def calibrate(self, model, log):
        """The cluster's profile plus the op classes' scales measured on
        one rank (bench/calibrate_ops.py), for this model's shapes."""
        out, one = self.build(model, "1x1", 1, "one-rank")
        step = os.path.join(out, "one-rank-vanilla.mlir")
        cl.run([self.moe_opt, one, *[a.format(lr=self.args.lr) for a in
                                      POLICIES[0].args], "-o", step])
        self.model_profile = os.path.join(out, "profile-calibrated.json")
        log(f"\n{model.name}: op classes measured on one rank (moe-run "
            "--profile, compute only) against the cost model on the "
            "profile above: the profile's op_scale for this model\n")
        # One copy per rank of the cluster: its ranks share this machine.
        calibrate_ops.calibrate(self.moe_run, self.moe_opt, step,
                                self.profile_path, self.model_profile,
                                data=cl.TEXT if model.text else None, log=log,
                                copies=self.cluster.ranks)

    def schedule(self, out, mlir, policy, i):
        fill = {"chunk": self.args.chunk, "profile": self.model_profile,
                "lr": self.args.lr}
        step = os.path.join(out, f"step{i}.mlir")
        label = policy.name.format(**fill)
        p = subprocess.run([self.moe_opt, mlir, *[a.format(**fill) for a in policy.args],
                            "-o", step], capture_output=True, text=True)
        if p.returncode:
            # Reported in the table; the other policies still run.
            first = next((l for l in p.stderr.splitlines() if "error" in l),
                         p.stderr.strip()[:200])
            return label, None, None, first[:240]
        report = p.stdout + p.stderr
        # Token chunks per layer as planned ([r_fwd, r_bwd] of each
        # chunked layer's first dispatch chunk, in order).
        degrees = re.findall(r"moe\.token_degree = array<i64: (\d+), (\d+)>",
                             open(step).read())
        if degrees:
            label += " [" + " ".join(f"{f}/{b}" for f, b in
                                     dict.fromkeys(degrees)) + "]"
        best = re.search(r"best:\s+S_p =\s+(\d+) B", report)
        if best:
            label += f" ({int(best.group(1)) // 1024} KiB)"
            fill["chunk"] = best.group(1)  # the twin below: the same S_p
        # Its twin with routing statistics, run once to record the routing
        # the simulator then prices (the timed step has no statistics).
        stats = step.replace(".mlir", "-stats.mlir")
        args = [a.format(**fill).replace("chunk-bytes=auto", f"chunk-bytes={fill['chunk']}")
                .replace(" lr=", " routing-stats=1 lr=") for a in policy.args]
        cl.run([self.moe_opt, mlir, *args, "-o", stats])
        self.time_planners(step)
        return label, step, stats, ""

    def time_planners(self, step):
        """NetMoE's host planner is charged its measured solve time
        (docs/host-planners.md): time the runtime's own solver (moe-trace
        time-solve) at each planner's shape in `step` -- I samples, this
        cluster's nodes x ranks per node, E experts, the block's tokens per
        sample and top-k -- and add it to the model's profile."""
        text = open(step).read()
        shapes = set(re.findall(
            r"moe\.routing_counts %\S+ on @\w+ axes = \[[^\]]*\] experts = (\d+)"
            r"[^:]*: \(tensor<\d+x(\d+)x(\d+)x\w+>\) -> tensor<(\d+)x", text))
        if "moe.plan_placement" not in text or not shapes:
            return
        with open(self.model_profile) as f:
            prof = json.load(f)
        points = prof.setdefault("host_planners", {}).setdefault(
            "moe.plan_placement", [])
        for experts, tokens, top_k, samples in sorted(shapes):
            shape = {"samples": int(samples), "nodes": self.cluster.nodes,
                     "ranks_per_node": self.cluster.ranks_per_node,
                     "experts": int(experts)}
            if any({k: p[k] for k in shape} == shape for p in points):
                continue
            out = cl.run([os.path.join(self.args.build, "bin", "moe-trace"),
                          "time-solve", "--samples", samples, "--nodes",
                          str(self.cluster.nodes), "--ranks-per-node",
                          str(self.cluster.ranks_per_node), "--experts",
                          experts, "--tokens", tokens, "--top-k", top_k])
            points.append({**shape, "us": 1000 * json.loads(out)[
                "transport_ms_median"]})
        with open(self.model_profile, "w") as f:
            json.dump(prof, f, indent=2)
        # The "alpha-beta only" column prices the same solve: without it
        # the simulator refuses the planner (an unpriced host solve).
        with open(self.plain_profile) as f:
            plain = json.load(f)
        plain["host_planners"] = prof["host_planners"]
        with open(self.plain_profile, "w") as f:
            json.dump(plain, f)

    def trainer_cmd(self, model, step):
        cmd = [self.moe_run, step, "--steps", str(self.args.steps),
               "--timeout", "300"]
        return cmd + (["--data", cl.TEXT] if model.text else [])

    def peer_cmd(self, model, inputs):
        cmd = [cl.SYSTEM_PYTHON, cl.PEER, *self.spec(model), "--inputs", inputs,
               "--steps", str(self.args.steps), "--lr", str(self.args.lr)]
        return cmd + (["--data", cl.TEXT] if model.text else [])

    def routed(self, model, row, out, i):
        """The simulator on the routing the step really had: the twin with
        statistics runs --steps steps once (untimed) and writes its routing
        trace; each timed step (3..N: the ones the measured median is
        over) is simulated on its own record, and the median taken."""
        trace = os.path.join(out, f"routing{i}.trace")
        cl.run(self.cluster.mpirun([self.moe_run, row.stats_step, "--steps",
                                    str(self.args.steps), "--routing-trace",
                                    trace, "--timeout", "300"]
                                   + (["--data", cl.TEXT] if model.text else [])),
               timeout=900)
        sims = [cl.simulate(self.moe_opt, row.step, self.model_profile,
                            f"routing-trace={trace} routing-step={s}")
                for s in range(3, self.args.steps + 1)]
        sims.sort(key=lambda r: r["iteration_us"])
        return sims[len(sims) // 2]

    def measure(self, model, log):
        self.calibrate(model, log)
        out, mlir = self.build(model)
        rows = []
        for i, policy in enumerate(POLICIES):
            label, step, stats, error = self.schedule(out, mlir, policy, i)
            row = Row(label, step, stats_step=stats or "", note=error)
            if step:
                row.uniform = cl.simulate(self.moe_opt, step, self.model_profile)
                row.plain = cl.simulate(self.moe_opt, step, self.plain_profile)
                row.sim = self.routed(model, row, out, i)
            rows.append(row)
        failed = [r for r in rows if not r.step]
        rows = [r for r in rows if r.step]
        if not rows or rows[0].label != "vanilla":
            sys.exit(f"error: {model.name}: vanilla did not schedule: "
                     f"{failed[0].note if failed else ''}")
        # The peer starts from the weights (and token ids) moe-run uses.
        inputs = os.path.join(out, "inputs")
        cl.run(self.cluster.mpirun([self.moe_run, rows[0].step, "--steps", "1",
                                    "--dump-inputs", inputs]
                                   + (["--data", cl.TEXT] if model.text else [])),
               timeout=600)
        peer = Row("pytorch peer (gloo)")
        jobs = [(r, self.cluster.mpirun(self.trainer_cmd(model, r.step)))
                for r in rows]
        if not self.args.no_peer:
            jobs.append((peer, self.cluster.mpirun(self.peer_cmd(model, inputs))))
        for rep in range(self.args.repeats):
            shift = rep % len(jobs)
            for row, cmd in jobs[shift:] + jobs[:shift]:
                try:
                    gaps, losses = cl.timed_run(cmd, self.args.steps, 900)
                except cl.RunFailed as e:
                    if row is not peer:
                        sys.exit(f"error: {row.label} on {model.name}: {e}")
                    # The peer refuses what it cannot run (a capacity
                    # drop): reported in the table, not fatal.
                    peer.note = [l for l in str(e).splitlines()
                                 if "error:" in l][:1] or str(e)[:200]
                    jobs = [j for j in jobs if j[0] is not peer]
                    continue
                row.runs.append(cl.median(gaps))
                row.losses = losses
            print(f"  [{model.name}] round {rep + 1}/{self.args.repeats} done",
                  file=sys.stderr, flush=True)
        return rows, peer, failed

    def explain(self, model, rows, log):
        """Runs each policy once more with bench/mpi_time_shim.c preloaded
        and prints where its ranks' MPI time went, per step, beside what
        the simulator charged for the same collectives."""
        shim = os.path.join(self.tmp, "mpi_time_shim.so")
        if not os.path.exists(shim):
            cl.run(["mpicc", "-O2", "-shared", "-fPIC", "-o", shim,
                    os.path.join(cl.HERE, "mpi_time_shim.c")])
        log(f"\n{model.name}: MPI time per step on rank 0 (MEASURED with "
            "bench/mpi_time_shim.c, one extra run per policy) against the "
            "simulator's collectives")
        # All-gathers: the variable-count exchanges' counts, the routing
        # statistics, and (on the first step only) the signature checks.
        log("\n| policy | all-to-alls: n x ms | all-reduces: n x ms | "
            "all-gathers: n x ms | communicator set-up ms | simulated "
            "all-to-alls: n x ms | simulated all-reduces: n x ms |")
        log("|---|---|---|---|---|---|---|")
        steps = self.args.steps
        for r in rows:
            cmd = self.cluster.mpirun(["-x", f"LD_PRELOAD={shim}",
                                       *self.trainer_cmd(model, r.step)])
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            got = {}
            for line in p.stderr.splitlines():
                f = line.split()
                if line.startswith("moe-mpi-time rank 0 "):
                    got[f[3]] = (int(f[5]), float(f[7]))
            def cell(*kinds):
                n = sum(got.get(k, (0, 0))[0] for k in kinds)
                t = sum(got.get(k, (0, 0))[1] for k in kinds)
                return f"{n / steps:.0f} x {t / n:.2f}" if n else "-", n / steps
            a2a, _ = cell("ialltoall", "ialltoallv")
            ar, _ = cell("iallreduce")
            busy = r.sim["busy_us_by_task"]
            # The simulator's collective tasks, counted in the step's IR.
            with open(r.step) as f:
                ir = f.read()
            n_dc = len(re.findall(r"#moe\.task<[DC],", ir))
            n_ar = len(re.findall(r"#moe\.task<AR,", ir))
            sim_a2a = (busy.get("D", 0) + busy.get("C", 0)) / 1e3
            sim_ar = busy.get("AR", 0) / 1e3
            setup = sum(got.get(k, (0, 0))[1] for k in ("comm_dup", "comm_split"))
            log(f"| {r.label} | {a2a} | {ar} | {cell('iallgather')[0]} | "
                f"{setup / steps:.1f} | {n_dc} x {sim_a2a / max(n_dc, 1):.2f} | "
                f"{n_ar} x {sim_ar / max(n_ar, 1):.2f} |")

    def profile(self):
        self.profile_path = os.path.join(self.tmp, "profile.json")
        prof, report = cl.measure_profile(self.cluster, os.path.join(
            self.args.build, "bin", "moe-profile"), self.profile_path,
            max_bytes=self.args.profile_max_bytes)
        # The alpha-beta rates alone: no contention, no op scales (the
        # simulator before they were modelled), for the "plain" column.
        self.plain_profile = os.path.join(self.tmp, "profile-plain.json")
        with open(self.plain_profile, "w") as f:
            json.dump({k: v for k, v in prof.items()
                       if k not in ("comm_cpu_share", "comm_stretch",
                                    "op_scale", "runtime_collective_scale")},
                      f)
        return prof, report


def loss_check(rows, peer):
    """Says whether every policy's and the peer's loss lines equal
    vanilla's (relative 1e-4: fp32 over a few steps)."""
    base = rows[0].losses
    lines = []
    def rel(a, b):
        return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))
    for r in rows[1:] + ([peer] if peer.losses else []):
        d = rel(r.losses, base)
        lines.append(f"{r.label}: {'equal' if d <= 1e-4 else 'DIFFERENT'} "
                     f"(max relative difference {d:.1e})")
    return lines


def table(model, rows, peer, log):
    v = cl.median(rows[0].runs)
    v_sim = rows[0].sim["iteration_us"] / 1e6
    log(f"\n### {model.name}: {model.note}\n")
    log("| policy | measured ms | measured speedup | simulated ms | simulated speedup "
        "| sim error | sim lower bound ms (compute, comm) | uniform routing: "
        "simulated ms (error) | alpha-beta only: simulated ms (error) |")
    log("|---|---|---|---|---|---|---|---|---|")
    def other(sim, m):
        t = sim["iteration_us"] / 1e6
        return f"{t * 1e3:.1f} ({100 * (t - m) / m:+.0f}%)"
    for r in rows:
        m, s = cl.median(r.runs), r.sim["iteration_us"] / 1e6
        lb = r.sim["lower_bound_us"] / 1e3
        log(f"| {r.label} | {m * 1e3:.1f} | {v / m:.2f}x | {s * 1e3:.1f} | "
            f"{v_sim / s:.2f}x | {100 * (s - m) / m:+.0f}% | {lb:.1f} "
            f"({r.sim['compute_busy_us'] / 1e3:.1f}, {r.sim['comm_busy_us'] / 1e3:.1f}) | "
            f"{other(r.uniform, m)} | {other(r.plain, m)} |")
    if peer.runs:
        p = cl.median(peer.runs)
        best = min(cl.median(r.runs) for r in rows)
        log(f"| {peer.label} | {p * 1e3:.1f} | {v / p:.2f}x | - | - | - | - | - | - |")
        log(f"\nmoe-run's fastest policy / the PyTorch peer: {p / best:.2f}x "
            f"(> 1: moe-run faster)")
    elif peer.note:
        log(f"\n{peer.label}: not measured: {' '.join(peer.note)}")
    log("\nnumerics (loss lines against vanilla's): " + "; ".join(loss_check(rows, peer)))
    spread = max((max(r.runs) - min(r.runs)) / cl.median(r.runs) for r in rows)
    log(f"largest spread of a policy's runs (max - min) / median: {100 * spread:.0f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default=os.path.join(cl.ROOT, "build"))
    ap.add_argument("--models", default=",".join(m.name for m in MODELS))
    ap.add_argument("--steps", type=int, default=10,
                    help="steps per run (the first 2 are warm-up)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chunk", default="64KiB", help="the fixed S_p")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--ranks-per-node", type=int, default=1,
                    help="default 1: one rank per core on a 2-core machine "
                         "(docs/measured-policies.md)")
    ap.add_argument("--rate", help="NIC rate (default: emulated-cluster.sh's)")
    ap.add_argument("--cluster", help="use this emulated cluster (up) instead "
                    "of bringing one up and down")
    ap.add_argument("--profile-max-bytes", type=int, default=4 << 20)
    ap.add_argument("--dropless", choices=["variable", "padded"],
                    default="variable",
                    help="dropless models: all-to-all-v of the routed tokens "
                         "(default) or padded to C = B*N slots")
    ap.add_argument("--policies",
                    help="only these policies (comma-separated names as the "
                         "table prints them, '{chunk}' as written in "
                         "POLICIES); vanilla, the speedups' base, always runs")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--explain", action="store_true",
                    help="also time each policy's MPI calls (a PMPI shim) "
                         "to split the measured - simulated gap")
    ap.add_argument("--markdown", help="also write the report here")
    ap.add_argument("--keep", help="keep the run's files (profiles, scheduled "
                    "steps, routing traces) in this directory, e.g. to "
                    "simulate them again")
    args = ap.parse_args()
    names = args.models.split(",")
    unknown = set(names) - {m.name for m in MODELS}
    if unknown:
        ap.error(f"unknown model(s) {', '.join(sorted(unknown))}; "
                 f"known: {', '.join(m.name for m in MODELS)}")
    if args.policies:
        wanted = args.policies.split(",")
        known = [p.name for p in POLICIES]
        if set(wanted) - set(known):
            ap.error(f"unknown policy(s) {', '.join(sorted(set(wanted) - set(known)))}; "
                     f"known: {', '.join(known)}")
        POLICIES[1:] = [p for p in POLICIES[1:] if p.name in wanted]
    if args.steps < 4 or args.repeats < 1:
        ap.error("--steps must be at least 4 and --repeats at least 1")
    lines = []

    def log(text=""):
        print(text, flush=True)
        lines.append(text)

    # A SIGTERM (timeout, a killed job) must still bring the cluster down:
    # Python's default handler would exit without running `finally`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("error: terminated"))
    cluster = (cl.Cluster(args.cluster, existing=True) if args.cluster else
               cl.Cluster(f"mpb{os.getpid() % 100000}", args.nodes,
                          args.ranks_per_node, args.rate))
    try:
        if EXPERTS % cluster.ranks:
            sys.exit(f"error: {EXPERTS} experts do not split over {cluster.ranks} ranks")
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
        with (contextlib.nullcontext(args.keep) if args.keep
              else tempfile.TemporaryDirectory()) as tmp:
            bench = Bench(args, cluster, tmp)
            prof, report = bench.profile()
            log(f"# Measured policies on the emulated cluster: {cluster.describe()}\n")
            log("MEASURED: moe-run step times (median of per-step times, median "
                f"over {args.repeats} interleaved runs of {args.steps} steps, first 2 "
                "dropped). SIMULATED: moe-opt --moe-simulate on the profile below "
                "(moe-profile on this cluster, at the start of this run) with "
                "its comm_cpu_share (what a running collective takes from "
                "compute), comm_stretch and comm_stretch_partial (how much "
                "longer a collective takes while all / some of its ranks "
                "compute) and each model's op_scale (the runtime's kernels "
                "measured on one rank), on the routing each step really had "
                "(a routing trace of the policy's run; the median over the "
                "timed steps; both ranks simulated jointly); 'uniform routing': the same without the trace; "
                "'alpha-beta only': also without comm_cpu_share, comm_stretch and op_scale. "
                f"Dropless models: {args.dropless} exchanges.\n")
            log("```")
            log(report.strip())
            log("```")
            beta = prof["collectives"]["all_to_all"]["inter"]["beta_us_per_byte"]
            want = cl.expected_a2a_beta(cluster)
            log(f"\ninter-node all-to-all beta: fitted {beta:.3e} us/B, the tc rate "
                f"alone {want:.3e} us/B: the link delivers {100 * want / beta:.0f}% "
                "of its rate to MPI")
            for model in (m for m in MODELS if m.name in names):
                rows, peer, failed = bench.measure(model, log)
                table(model, rows, peer, log)
                for r in failed:
                    log(f"\n{r.label}: not measured: moe-opt refused to "
                        f"schedule it: {r.note}")
                if args.explain:
                    bench.explain(model, rows, log)
    finally:
        cluster.down()
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
