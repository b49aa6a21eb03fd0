#!/usr/bin/env python3
"""NetMoE reproduction (issue 14, part A): the placement planner's numbers
next to the paper's, all in one run.

1. Solve time: NetMoE's two-stage placement solve (moe-trace time-solve)
   for I = 32 ... 1024 samples. The transportation form (ours) and the
   paper's expanded Kuhn-Munkres graph run interleaved in one process, and
   the medians are compared. Paper Table 4 (KM, J = 16) is printed
   alongside. Goal: < 10 ms at I = 1024 on one core.
2. Inter-node volume with and without NetMoE, on synthetic locality
   traces for the paper's Table 5 settings (2 nodes / 16 GPUs and
   4 nodes / 32 GPUs, I/J = 4, S = 1024, E = 2J, K = 2, 12 MoE blocks).
   - Per-sample locality lambda is swept, because the paper gives no
     locality statistic.
   - The next block's counts come from none / the transition predictor /
     the oracle.
   - Volumes are also converted to MB per model (fp32, hidden size H),
     next to Table 5.
3. Rows for a real trace recorded by the trainer (--trace FILE; record one
   with MOE_GRID=2x2 MOE_ROUTING_TRACE=FILE examples/trainer/train.sh,
   which runs moe-run --routing-trace).
4. Predicted step-time speedup on NetMoE's cluster. This is SIMULATED:
   moe-opt --moe-simulate on bench/netmoe-a800.json, where the all-to-all
   intra/inter bandwidth terms are scaled by the volume ratios that
   NetMoE reaches on the synthetic traces.
5. (--measure, needs root) MEASURED in the step: the example trainer
   under moe-run on an emulated 2-node cluster (scripts/emulated-cluster.sh)
   without NetMoE, with it (netmoe=1) and with it planning the gather only
   (netmoe-predict=0): step times (interleaved runs, medians), the
   inter-node all-to-all bytes the ranks actually sent (bench/
   mpi_time_shim.c), the in-step predictor's error (moe-run's "netmoe:"
   lines), next to what the trace replay and the simulator predict for the
   same routing (the plain run's recorded trace).

  python3 bench/netmoe.py --moe-trace build/bin/moe-trace \\
      --moe-opt build/bin/moe-opt [--quick] [--trace FILE] [--markdown OUT]
      [--measure [--moe-run build/bin/moe-run] [--rate 300mbit]
       [--measure-steps 12] [--measure-repeats 3]]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import netmoe_measured
import profiles

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GEN = os.path.join(ROOT, "python", "gen_model_mlir.py")
PROFILE = os.path.join(HERE, "netmoe-a800.json")

# Paper Table 4 (MoE-GPT-S, J = 16): I/J -> KM ms, PuLP ms, scatter+compute ms.
TABLE4 = {2: (0.08, 42.8, 3.69), 4: (0.48, 50.1, 7.13), 8: (1.48, 72.9, 13.50),
          16: (10.82, 143.7, 27.31), 24: (31.09, 266.5, 41.65)}
# Paper Table 3 / 5: model -> H; Table 5 (MB): (nodes, model) ->
# (w/o intra, w/o inter, w/ intra, w/ inter).
HIDDEN = {"S": 768, "M": 1024, "L": 1280, "XL": 1600, "XXL": 4096}
TABLE5 = {
    (2, "S"): (168.45, 191.07, 162.24, 116.37),
    (2, "M"): (222.89, 258.20, 214.31, 147.33),
    (2, "L"): (281.81, 318.56, 236.53, 208.69),
    (2, "XL"): (347.44, 402.06, 313.00, 256.94),
    (2, "XXL"): (922.40, 989.60, 872.00, 570.40),
    (4, "S"): (167.07, 575.88, 219.21, 351.15),
    (4, "M"): (224.24, 766.87, 288.58, 492.44),
    (4, "L"): (280.56, 958.44, 376.66, 591.72),
    (4, "XL"): (350.62, 1199.12, 423.37, 791.19),
    (4, "XXL"): (884.80, 3080.00, 1201.60, 1884.00),
}
MIB = 1 << 20


def run(cmd, stdin=None):
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"error: {' '.join(cmd[:3])} ...:\n{p.stderr[-3000:]}")
    return p.stdout


def pct(new, old):
    return 100.0 * (new - old) / old if old else 0.0


class Bench:
    def __init__(self, args, tmp, log):
        self.a, self.tmp, self.log = args, tmp, log
        self.traces = {}

    # -- 1. solve time ---------------------------------------------------
    def solve_times(self):
        a, log = self.a, self.log
        sizes = [64, 128] if a.quick else [32, 64, 128, 256, 384, 512, 768, 1024]
        log("## 1. Placement solve time (one core; medians of interleaved "
            "repetitions)\n")
        log("Both stages of NetMoE's solve, counts to placement, for J = 16 "
            "(2 nodes x 8) as in the paper's Table 4, and J = 32 (4 x 8). "
            "'transportation' is the min-cost flow on samples -> nodes / ranks "
            "(what the planner uses). 'expanded' is the paper's bipartite graph "
            "(nodes duplicated I/N times, ranks I/J times), solved by the same "
            "network simplex. Both reach the same optimum; moe-trace checks "
            "that on every repetition.\n")
        log("| I | J | transportation ms | expanded (KM graph) ms | "
            "expanded / transportation | paper KM ms (J = 16) |")
        log("|---|---|---|---|---|---|")
        worst = 0.0
        for samples in sizes:
            for nodes in (2, 4):
                ranks = nodes * 8
                if samples % ranks:
                    continue
                expanded = samples <= 1024
                out = json.loads(run(
                    [a.moe_trace, "time-solve", "--samples", str(samples),
                     "--nodes", str(nodes), "--ranks-per-node", "8",
                     "--experts", str(2 * ranks), "--tokens", "1024",
                     "--reps", str(a.reps)] + (["--expanded"] if expanded else [])))
                t = out["transport_ms_median"]
                if samples == max(sizes):
                    worst = max(worst, t)
                e = out.get("expanded_ms_median")
                paper = TABLE4.get(samples // 16) if nodes == 2 else None
                log(f"| {samples} | {ranks} | {t:.3f} | "
                    f"{'%.3f' % e if e is not None else '-'} | "
                    f"{'%.1fx' % (e / t) if e else '-'} | "
                    f"{paper[0] if paper and samples % 16 == 0 else '-'} |")
        log(f"\nLargest I = {max(sizes)}: {worst:.3f} ms (goal < 10 ms on one "
            "core). The machine is shared and times are noisy; the medians "
            "are what counts.\n")

    # -- 2. volumes ------------------------------------------------------
    def trace(self, nodes, locality):
        key = (nodes, locality)
        if key not in self.traces:
            path = os.path.join(self.tmp, f"synth-{nodes}-{locality}.trace")
            a = self.a
            run([a.moe_trace, "synth", "--nodes", str(nodes),
                 "--ranks-per-node", "8", "--samples-per-rank", "4",
                 "--tokens", "256" if a.quick else "1024",
                 "--experts", str(2 * nodes * 8), "--top-k", "2",
                 "--blocks", "4" if a.quick else "12",
                 "--steps", str(a.steps), "--locality", str(locality),
                 "--zipf", "1.0", "--seed", "1", "-o", path])
            self.traces[key] = path
        return self.traces[key]

    def replay(self, path, predictor):
        return json.loads(run([self.a.moe_trace, "netmoe", path, "--predictor",
                               predictor, "--json"]))

    def volumes(self):
        a, log = self.a, self.log
        lambdas = [0.5, 0.8] if a.quick else [0.0, 0.25, 0.5, 0.75, 0.8, 0.9]
        log("## 2. Inter-node all-to-all volume, synthetic locality traces\n")
        log(f"Table 5 settings: I/J = 4, S = {256 if a.quick else 1024} tokens, "
            f"E = 2J, top-2, {4 if a.quick else 12} MoE blocks, {a.steps} steps. "
            "Zipf skew s = 1.0, 16 topics, 2 experts per topic and block. "
            "Tokens per block and all-to-all, cluster-wide, as a change against "
            "the samples staying home. 'gather' is the all-to-all whose "
            "destination NetMoE chooses. 'scatter' is the next block's "
            "dispatch from there (block 0's never changes). 'pred. err.' is the "
            "transition predictor's sum |pred - true| / sum true. "
            "'moved' is the share of samples each gather moves across nodes / "
            "at all (Table 5: 43-46 / 91-92 % on 2 nodes, 72-73 / 96 % on 4).\n")
        log("| nodes/GPUs | lambda | next counts | gather inter | scatter inter "
            "| both inter | both intra | moved across / all % | pred. err. |")
        log("|---|---|---|---|---|---|---|---|---|")
        self.results = {}
        for nodes in (2, 4):
            for lam in lambdas:
                path = self.trace(nodes, lam)
                for pred in ("none", "transition", "oracle"):
                    r = self.replay(path, pred)
                    self.results[(nodes, lam, pred)] = r
                    v = r["per_block"]
                    g, gb = v["gather"], v["gather_baseline"]
                    s, sb = v["scatter"], v["scatter_baseline"]
                    both = g["inter_node"] + s["inter_node"]
                    bothb = gb["inter_node"] + sb["inter_node"]
                    intra = g["intra_node"] + s["intra_node"]
                    intrab = gb["intra_node"] + sb["intra_node"]
                    err = (f"{r['prediction_error']:.3f}" if pred == "transition"
                           else "-")
                    log(f"| {nodes}/{nodes * 8} | {lam} | {pred} | "
                        f"{pct(g['inter_node'], gb['inter_node']):+.1f}% | "
                        f"{pct(s['inter_node'], sb['inter_node']):+.1f}% | "
                        f"{pct(both, bothb):+.1f}% | {pct(intra, intrab):+.1f}% | "
                        f"{r['moved_across_nodes_pct']:.1f} / {r['moved_pct']:.1f} | "
                        f"{err} |")
        log("")
        lam = a.table5_lambda
        if (2, lam, "transition") not in self.results:
            return
        log(f"### Table 5 in MB (lambda = {lam}, transition predictor)\n")
        log("MB = tokens x H x 4 bytes (fp32) / 2^20, per block and all-to-all. "
            "'w/' is the gather, the all-to-all NetMoE places (the scatter "
            "column above shows the next dispatch). Token volumes do not "
            "depend on H, so the models differ only by the factor H. The "
            "paper's models each have their own real routing. The w/o columns "
            "check the unit: they match uniform routing, as in the paper.\n")
        log("| nodes/GPUs | model | w/o intra / inter (paper) | "
            "w/ intra / inter (paper) | inter change (paper) |")
        log("|---|---|---|---|---|")
        for nodes in (2, 4):
            v = self.results[(nodes, lam, "transition")]["per_block"]
            g, gb = v["gather"], v["gather_baseline"]
            for model, h in HIDDEN.items():
                mb = h * 4 / MIB
                p = TABLE5[(nodes, model)]
                log(f"| {nodes}/{nodes * 8} | MoE-GPT-{model} | "
                    f"{gb['intra_node'] * mb:.1f} / {gb['inter_node'] * mb:.1f} "
                    f"({p[0]} / {p[1]}) | {g['intra_node'] * mb:.1f} / "
                    f"{g['inter_node'] * mb:.1f} ({p[2]} / {p[3]}) | "
                    f"{pct(g['inter_node'], gb['inter_node']):+.1f}% "
                    f"({pct(p[3], p[1]):+.1f}%) |")
        log("")

    # -- 3. real traces --------------------------------------------------
    def real_trace(self):
        log = self.log
        log("## 3. Real routing traces from the trainer\n")
        if not self.a.trace:
            log("| trace | gather inter | scatter inter | both inter | moved "
                "across / all % | pred. err. |")
            log("|---|---|---|---|---|---|")
            log("| (no --trace) | - | - | - | - | - |")
            log("\nNo real trace given: record one with MOE_GRID=2x2 "
                "MOE_ROUTING_TRACE=FILE examples/trainer/train.sh (moe-run "
                "--routing-trace) and rerun with --trace FILE. The code path "
                "is the same one the synthetic rows use.\n")
            return
        log("| trace | next counts | gather inter | scatter inter | both inter "
            "| moved across / all % | pred. err. |")
        log("|---|---|---|---|---|---|---|")
        for pred in ("none", "transition", "oracle"):
            r = self.replay(self.a.trace, pred)
            v = r["per_block"]
            g, gb, s, sb = (v["gather"], v["gather_baseline"], v["scatter"],
                            v["scatter_baseline"])
            log(f"| {os.path.basename(self.a.trace)} | {pred} | "
                f"{pct(g['inter_node'], gb['inter_node']):+.1f}% | "
                f"{pct(s['inter_node'], sb['inter_node']):+.1f}% | "
                f"{pct(g['inter_node'] + s['inter_node'], gb['inter_node'] + sb['inter_node']):+.1f}% | "
                f"{r['moved_across_nodes_pct']:.1f} / {r['moved_pct']:.1f} | "
                f"{r['prediction_error']:.3f} |")
        log("")

    # -- 4. simulated step time -------------------------------------------
    def model(self, nodes, h):
        path = os.path.join(self.tmp, f"model-{nodes}-{h}.mlir")
        run([sys.executable, GEN, "gpt2-tiny-moe", "--grid", f"{nodes}x8",
             "--layers", "12", "--experts-per-rank", "2",
             "--set", f"embed={h}", "--set", f"hidden={4 * h}",
             "--set", "seq=1024", "--set", "batch=4",
             "--capacity-factor", "1.0", "-o", path])
        return path

    def simulate(self, model, nodes, policy, degree, intra=1.0, inter=1.0):
        prof = profiles.load(PROFILE)
        prof["mesh"]["nodes"] = nodes
        profiles.scale_links(prof, "all_to_all", intra, ("intra",))
        profiles.scale_links(prof, "all_to_all", inter, ("inter",))
        path = profiles.write(prof, os.path.join(
            self.tmp, f"profile-{nodes}-{intra}-{inter}.json"))
        out = run([self.a.moe_opt, model, "--moe-flowmoe-pipeline=" +
                   f"degree={degree} policy={policy}",
                   f"--moe-simulate=profile={path} json=true", "-o", os.devnull])
        return json.loads(out)[0]

    def step_time(self):
        a, log = self.a, self.log
        lam = a.table5_lambda
        log("## 4. Predicted step-time speedup [SIMULATED]\n")
        log("SIMULATED with moe-opt --moe-simulate on profile netmoe-a800 "
            "(bench/netmoe-a800.json: public-spec estimates of the paper's "
            "A800 cluster, not calibrated). Models: GPT-2 backbone, 12 blocks, "
            "all FFNs MoE, B = I/J = 4, S = 1024, E/J = 2, top-2, f = 1.0, "
            "fp32. The paper gives no layer counts. NetMoE is modelled as "
            "all-to-all intra / inter bandwidth terms scaled by the volume "
            "ratios it reaches on the synthetic traces (scatter + gather, "
            f"transition predictor, lambda = {lam}; the backward all-to-alls "
            "reuse the forward placement). The solve is hidden (section 1). "
            "The trace-driven simulator of issue 14 part B will replace this "
            "average with per-block volumes.\n")
        log("| nodes/GPUs | model | schedule | a2a intra x, inter x | step ms "
            "w/o -> w/ | speedup | all-to-all share w/o |")
        log("|---|---|---|---|---|---|---|")
        models = {"S": 768} if a.quick else HIDDEN
        for nodes in (2, 4):
            r = self.results.get((nodes, lam, "transition"))
            if not r:
                continue
            v = r["per_block"]
            both = lambda k, base: (v["gather" + base][k] + v["scatter" + base][k])
            ri = both("intra_node", "") / both("intra_node", "_baseline")
            re = both("inter_node", "") / both("inter_node", "_baseline")
            for name, h in models.items():
                model = self.model(nodes, h)
                for policy, degree in (("vanilla", 1), ("flowmoe", 2)):
                    base = self.simulate(model, nodes, policy, degree)
                    net = self.simulate(model, nodes, policy, degree, ri, re)
                    t0, t1 = base["iteration_us"] / 1e3, net["iteration_us"] / 1e3
                    busy = base["busy_us_by_task"]
                    share = (busy.get("D", 0) + busy.get("C", 0)) / base["iteration_us"]
                    log(f"| {nodes}/{nodes * 8} | MoE-GPT-{name} | "
                        f"{policy} R={degree} | {ri:.3f}, {re:.3f} | "
                        f"{t0:.1f} -> {t1:.1f} | {t0 / t1:.3f}x | {100 * share:.0f}% |")
        log("\nThe paper reports up to 1.67x end-to-end over FastMoE, measured "
            "(Fig. 6, values in the figure only). 'vanilla' is our closest "
            "stand-in for FastMoE. 'all-to-all share' is the dispatch + "
            "combine busy time (forward and backward) over the simulated step.\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--moe-trace", required=True)
    ap.add_argument("--moe-opt", required=True)
    ap.add_argument("--quick", action="store_true",
                    help="small sizes and few steps (the lit smoke test)")
    ap.add_argument("--trace", help="a real routing trace (section 3)")
    ap.add_argument("--steps", type=int, help="steps per synthetic trace")
    ap.add_argument("--reps", type=int, help="repetitions per solve timing")
    ap.add_argument("--table5-lambda", type=float, default=0.8,
                    help="locality for the MB table and the step time")
    ap.add_argument("--markdown", help="also write the tables here")
    netmoe_measured.add_arguments(ap)
    args = ap.parse_args()
    args.steps = args.steps or (3 if args.quick else 10)
    args.reps = args.reps or (3 if args.quick else 15)
    if args.quick and args.table5_lambda not in (0.5, 0.8):
        args.table5_lambda = 0.8
    lines = []

    def log(text=""):
        print(text, flush=True)
        lines.append(text)

    log("# NetMoE reproduction: placement solve, all-to-all volumes, step time\n")
    log("Volumes come from routing traces: synthetic ones (section 2) and, "
        "with --trace, one the example trainer recorded (section 3). Solve "
        "times are measured on this machine, one core. Step times are "
        "SIMULATED (section 4).\n")
    with tempfile.TemporaryDirectory() as tmp:
        b = Bench(args, tmp, log)
        b.solve_times()
        b.volumes()
        b.real_trace()
        b.step_time()
        if args.measure:
            netmoe_measured.measure(args, tmp, log)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
