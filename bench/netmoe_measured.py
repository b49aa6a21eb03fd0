"""Section 5 of bench/netmoe.py: NetMoE MEASURED in the training step.

The example trainer (examples/trainer: byte-level, 2 MoE blocks, 8
experts, top-2) runs under moe-run on an emulated 2-node x 2-rank cluster
(scripts/emulated-cluster.sh, via cluster_lib) in four schedules of the
same pipeline (CONFIGS): without NetMoE, with it (netmoe=1: the planner
prices the gather and the next block's predicted dispatch), planning the
gather only (netmoe=1 netmoe-predict=0), and NetMoE's ops with the
identity placement (what the ops change apart from the placement). For
each:

- step time: the runs of the three are interleaved (their order rotating
  every round), each run's median step, then the median over the runs;
- the all-to-all-v bytes the ranks actually sent across nodes and within
  nodes, per step, summed over the ranks, and the small collectives'
  bytes (all-gathers, reduce-scatters): one more run each with
  bench/mpi_time_shim.c preloaded (MOE_SHIM_RANKS_PER_NODE);
- the in-step predictor's error, from moe-run's "netmoe:" lines.

Next to them, what is predicted for the same routing: the plain run's
routing trace (moe-run --routing-trace; NetMoE never changes the numerics,
so the NetMoE runs route the same tokens up to fp32 rounding) replayed by
moe-trace netmoe (the planner's code, outside the step) gives the tokens
every all-to-all moves, converted to bytes (row M x 4 B, times the
all-to-alls that move them: SCATTERS, GATHERS); and moe-opt --moe-simulate on the profile
moe-profile measures on the same cluster gives the step times, NetMoE's
all-to-all bandwidth terms scaled by the replay's volume ratios as in
section 4 (SIMULATED).
"""
import json
import os
import subprocess
import sys

import cluster_lib as cl
import profiles

PIPELINE = ("degree=2 policy=flowmoe chunk-bytes=64KiB optimizer=adamw "
            "lr=0.02 weight-decay=0.01 clip-norm=1.0")
# (label, pass options before the pipeline, pipeline options added). The
# identity placement runs NetMoE's ops (placing combine, residual inlined,
# labels moved) with every sample kept home: what the ops cost apart from
# where the planner sends the samples.
CONFIGS = [("without NetMoE", (), ""),
           ("NetMoE", (), " netmoe=1"),
           ("NetMoE, gather only", (), " netmoe=1 netmoe-predict=0"),
           ("NetMoE ops, identity placement", ("--moe-netmoe=identity=1",), "")]
# All-to-alls per block and micro-batch that move a scatter's / a gather's
# rows: dispatch + its vjp; combine + its vjp, which for the plain combine
# brings the expert outputs to the tokens again (2), for the placing
# combine returns the gate weights' gradients by a reduce-scatter (1).
SCATTERS, GATHERS = 2, {"plain": 3, "placed": 2}
TRAINER_M = 64  # examples/trainer/make_model.py's M: a token row's floats


def add_arguments(ap):
    g = ap.add_argument_group("section 5: measured in the step (needs root)")
    g.add_argument("--measure", action="store_true",
                   help="run the example trainer with and without NetMoE on "
                        "an emulated 2 x 2 cluster")
    g.add_argument("--moe-run", help="default: next to --moe-opt")
    g.add_argument("--rate", default="300mbit", help="NIC rate (tbf)")
    g.add_argument("--cluster", help="an emulated 2 x 2 cluster that is up")
    g.add_argument("--measure-steps", type=int, default=12)
    g.add_argument("--measure-repeats", type=int, default=3)


class Measured:
    def __init__(self, args, tmp, cluster):
        self.a, self.tmp, self.cluster = args, tmp, cluster
        bin_dir = os.path.dirname(os.path.abspath(args.moe_opt))
        self.moe_run = args.moe_run or os.path.join(bin_dir, "moe-run")
        self.moe_profile = os.path.join(bin_dir, "moe-profile")
        self.steps = args.measure_steps

    def path(self, name):
        return os.path.join(self.tmp, name)

    def build(self):
        onnx, model = self.path("byte-moe.onnx"), self.path("byte-moe.mlir")
        cl.run([cl.SYSTEM_PYTHON, cl.MAKE_TRAINER, "-o", onnx])
        cl.run([self.a.moe_opt, onnx, f"--onnx-grid={self.cluster.grid}",
                "-o", model])
        steps = {}
        for i, (label, before, extra) in enumerate(
                CONFIGS + [("trace", (), " routing-stats=1")]):
            steps[label] = self.path(f"step{i}.mlir")
            cl.schedule(self.a.moe_opt, model,
                        [*before, f"--moe-flowmoe-pipeline={PIPELINE}{extra}"],
                        steps[label])
        return steps

    def trainer(self, step, *extra):
        return [self.moe_run, step, "--steps", str(self.steps), "--data",
                cl.TEXT, "--timeout", "300", *extra]

    def times(self, steps):
        """Interleaved timed runs: label -> (median step s, losses)."""
        jobs = [(label, self.cluster.mpirun(self.trainer(steps[label])))
                for label, _, _ in CONFIGS]
        runs = {label: [] for label, _, _ in CONFIGS}
        losses = {}
        for rep in range(self.a.measure_repeats):
            shift = rep % len(jobs)
            for label, cmd in jobs[shift:] + jobs[:shift]:
                try:
                    gaps, losses[label] = cl.timed_run(cmd, self.steps, 900)
                except cl.RunFailed as e:
                    sys.exit(f"error: {label}: {e}")
                runs[label].append(cl.median(gaps))
            print(f"  [netmoe measured] round {rep + 1}/"
                  f"{self.a.measure_repeats}", file=sys.stderr, flush=True)
        return {k: (cl.median(v), losses[k], v) for k, v in runs.items()}

    def volumes(self, step):
        """One run with the PMPI shim: bytes per step summed over the
        ranks (inter-node, intra-node all-to-all-v; all-gathers), and the
        mean of moe-run's per-step prediction errors (None if none)."""
        shim = self.path("mpi_time_shim.so")
        if not os.path.exists(shim):
            cl.run(["mpicc", "-O2", "-shared", "-fPIC", "-o", shim,
                    os.path.join(cl.HERE, "mpi_time_shim.c")])
        cmd = self.cluster.mpirun(
            ["-x", f"LD_PRELOAD={shim}", "-x",
             f"MOE_SHIM_RANKS_PER_NODE={self.cluster.ranks_per_node}",
             *self.trainer(step)])
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if p.returncode:
            sys.exit(f"error: shim run of {step}:\n{p.stderr[-3000:]}")
        got, errors = {}, []
        for line in p.stderr.splitlines():
            f = line.split()
            if line.startswith("moe-mpi-time rank "):
                got[f[3]] = got.get(f[3], 0.0) + float(f[9])
            elif " netmoe: next-block prediction error " in line:
                errors.append(float(f[6]))
        per_step = {k: v / self.steps for k, v in got.items()}
        return per_step, (sum(errors) / len(errors) if errors else None)

    def replay(self, trace, predictor):
        return json.loads(cl.run([self.a.moe_trace, "netmoe", trace,
                                  "--predictor", predictor, "--json"]))

    def predicted_bytes(self, r, baseline, combine):
        """All-to-all-v bytes per step, forward + backward, summed over
        the ranks: (inter, intra). `baseline`: the samples stay home;
        `combine`: "plain" or "placed" (GATHERS)."""
        v, suffix = r["per_block"], "_baseline" if baseline else ""
        per_step = r["blocks"] / self.steps * TRAINER_M * 4
        return tuple((SCATTERS * v["scatter" + suffix][k] +
                      GATHERS[combine] * v["gather" + suffix][k]) * per_step
                     for k in ("inter_node", "intra_node"))


def measure(args, tmp, log):
    cluster = (cl.Cluster(args.cluster, existing=True) if args.cluster else
               cl.Cluster(f"nm{os.getpid() % 10000}", 2, 2, args.rate))
    try:
        run(Measured(args, tmp, cluster), log)
    finally:
        cluster.down()


def pct(new, old):
    return 100.0 * (new - old) / old if old else 0.0


# Per configuration: which replay predicts its volumes, whether its
# samples stay home, and its combine's kind (GATHERS).
PREDICTION = {"without NetMoE": ("none", True, "plain"),
              "NetMoE": ("transition", False, "placed"),
              "NetMoE, gather only": ("none", False, "placed"),
              "NetMoE ops, identity placement": ("none", True, "placed")}


def run(m, log):
    log(f"## 5. Measured in the step: the example trainer on an emulated "
        f"cluster ({m.cluster.describe()})\n")
    steps = m.build()
    trace = m.path("plain.trace")
    cl.run(m.cluster.mpirun(m.trainer(steps["trace"], "--routing-trace",
                                      trace)), timeout=900)
    replays = {p: m.replay(trace, p) for p in ("none", "transition")}
    times = m.times(steps)
    vols = {label: m.volumes(steps[label]) for label, _, _ in CONFIGS}
    cl.measure_profile(m.cluster, m.moe_profile, m.path("profile.json"))
    pred = {label: m.predicted_bytes(replays[p], home, combine)
            for label, (p, home, combine) in PREDICTION.items()}
    base = pred["without NetMoE"]
    log(f"Pipeline: {PIPELINE} (+ the row's options), {m.steps} steps, "
        f"{m.a.measure_repeats} interleaved runs each; grid "
        f"{m.cluster.grid}, 8 experts, top-2. KB are per step, summed over "
        "the ranks, MEASURED with bench/mpi_time_shim.c (the bytes each "
        "rank's MPI_Ialltoallv sent to other nodes / to its own node's other "
        "ranks) next to the REPLAY's prediction: moe-trace netmoe on the "
        "plain run's routing trace, tokens x M = 64 floats x 4 B x the "
        f"all-to-alls that move them ({SCATTERS} per scatter; per gather "
        f"{GATHERS['plain']} for the plain combine, whose vjp brings the "
        f"expert outputs to the tokens again, {GATHERS['placed']} for "
        "NetMoE's placing combine, whose vjp returns the gate weights' "
        "gradients by a reduce-scatter instead). 'simulated' is moe-opt "
        "--moe-simulate on the profile moe-profile measured on this cluster "
        "in this run, the all-to-all bandwidth terms scaled by the replay's "
        "volume ratio against the plain step [SIMULATED]. Step times are "
        "wall-clock medians on the shared 2-core machine.\n")
    log("| schedule | step ms: median (runs) | speedup vs without | a2a-v "
        "inter-node KB: measured / replay | a2a-v intra-node KB: measured / "
        "replay | all-gather + reduce-scatter KB | prediction error: in "
        "step / replay | simulated step ms |")
    log("|---|---|---|---|---|---|---|---|")
    t0, base_losses = times["without NetMoE"][0], times["without NetMoE"][1]
    differ = []
    for label, _, _ in CONFIGS:
        t, losses, runs = times[label]
        v, err = vols[label]
        p = pred[label]
        sim = simulate_scaled(m, steps[label], p[1] / base[1], p[0] / base[0])
        rel = max(abs(a - b) / max(abs(b), 1e-30)
                  for a, b in zip(losses, base_losses))
        if rel > 1e-4:
            differ.append(f"{label}: {rel:.1e}")
        perr = (f"{err:.3f} / {replays['transition']['prediction_error']:.3f}"
                if label == "NetMoE" and err is not None else "-")
        small = (v.get("iallgather", 0) + v.get("ireduce_scatter_block", 0))
        log(f"| {label} | {t * 1e3:.1f} "
            f"({', '.join('%.1f' % (x * 1e3) for x in runs)}) | "
            f"{t0 / t:.3f}x | {v.get('ialltoallv_inter_node', 0) / 1e3:.1f} / "
            f"{p[0] / 1e3:.1f} | {v.get('ialltoallv_intra_node', 0) / 1e3:.1f}"
            f" / {p[1] / 1e3:.1f} | {small / 1e3:.1f} | {perr} | {sim:.1f} |")
    meas = {label: vols[label][0].get("ialltoallv_inter_node", 0)
            for label, _, _ in CONFIGS}
    ident = "NetMoE ops, identity placement"
    log(f"\nInter-node all-to-all-v bytes, measured (replay): NetMoE "
        f"{pct(meas['NetMoE'], meas['without NetMoE']):+.1f} % "
        f"({pct(pred['NetMoE'][0], base[0]):+.1f} %) against the plain step; "
        f"of that, the placement itself (NetMoE against its own ops with "
        f"the identity placement) {pct(meas['NetMoE'], meas[ident]):+.1f} % "
        f"({pct(pred['NetMoE'][0], pred[ident][0]):+.1f} %), planning the "
        f"gather only {pct(meas['NetMoE, gather only'], meas[ident]):+.1f} % "
        f"({pct(pred['NetMoE, gather only'][0], pred[ident][0]):+.1f} %).")
    log("Loss lines: " + ("every schedule's equal the plain run's (relative "
                          "1e-4)." if not differ else
                          "**differ from the plain run's: " +
                          "; ".join(differ) + "**") + "\n")


def simulate_scaled(m, step, intra, inter):
    prof = profiles.load(m.path("profile.json"))
    profiles.scale_links(prof, "all_to_all", intra, ("intra",))
    profiles.scale_links(prof, "all_to_all", inter, ("inter",))
    path = profiles.write(prof, m.path(f"profile-{intra:.4f}-{inter:.4f}.json"))
    return cl.simulate(m.a.moe_opt, step, path)["iteration_us"] / 1e3
