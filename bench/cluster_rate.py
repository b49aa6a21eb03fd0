#!/usr/bin/env python3
"""Derives the emulated cluster's default NIC rate (docs/cluster.md): the
rate at which the example trainer's compute : inter-node communication
ratio on this machine equals that of FlowMoE's Cluster 1.

1. Cluster 1's ratio. bench/flowmoe_tables.py calibrates the
   flowmoe-cluster1 profile to FlowMoE Table 1 (vanillaEP, 16 GPUs); the
   simulator then gives, for each Table 2 model on 2 x 8 GPUs, the vanilla
   step's communication busy time over its compute busy time. Their
   geometric mean is the target rho (SIMULATED, calibrated profile).
2. This machine's compute and links. moe-profile measures the emulated
   cluster (brought up at --probe-rate, or --cluster NAME if one is up):
   GEMM and memory rates, collectives' alpha and beta (MEASURED).
3. The rate. The byte-level trainer (examples/trainer/make_model.py,
   imported for the cluster's grid as train.sh does) is scheduled vanilla;
   its simulated comm / compute on the measured profile, with the
   inter-node betas scaled by probe-rate / rate (the bandwidth term is the
   link's), is solved for rho by bisection. The collectives' alphas are
   set to 0 unless --keep-alpha: on a shared machine they are mostly
   scheduling noise (ms in one run, 0 in the next).

   python3 bench/cluster_rate.py --build build [--probe-rate 800mbit]
"""
import argparse
import math
import os
import sys
import tempfile

import cluster_lib as cl
import profiles

sys.path.insert(0, cl.HERE)
import flowmoe_tables  # noqa: E402


def cluster1_ratio(moe_opt, tmp):
    bench = flowmoe_tables.Bench(moe_opt, tmp)
    bench.calibrate(lambda *a: None)
    rows = {}
    for name in flowmoe_tables.TABLE1:
        r = bench.simulate(name, 16, "vanilla", 1)
        rows[name] = r["comm_busy_us"] / r["compute_busy_us"]
    return rows, math.exp(sum(map(math.log, rows.values())) / len(rows))


def scaled_profile(profile, factor, path, keep_alpha):
    p = profiles.copy_of(profile)
    for kind, links in p["collectives"].items():
        profiles.scale_links(p, kind, factor, ("inter",))
        if not keep_alpha:
            for link in links.values():
                link["alpha_us"] = 0.0
    return profiles.write(p, path)


def trainer_model(moe_opt, grid, tmp):
    onnx = os.path.join(tmp, "byte-moe.onnx")
    cl.run([cl.SYSTEM_PYTHON, cl.MAKE_TRAINER, "-o", onnx])
    mlir = os.path.join(tmp, "byte-moe.mlir")
    cl.run([moe_opt, onnx, f"--onnx-grid={grid}", "--moe-bound-dropless",
            "-o", mlir])
    step = os.path.join(tmp, "byte-moe.vanilla.mlir")
    cl.schedule(moe_opt, mlir, ["--moe-flowmoe-pipeline=degree=1 policy=vanilla"], step)
    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default=os.path.join(cl.ROOT, "build"))
    ap.add_argument("--cluster", help="an emulated cluster that is up "
                    "(default: bring one up at --probe-rate, and down after)")
    ap.add_argument("--probe-rate", default="800mbit")
    ap.add_argument("--ranks-per-node", type=int, default=1)
    ap.add_argument("--keep-alpha", action="store_true",
                    help="keep the collectives' fitted alphas (default: "
                         "zero them: on a shared machine they are mostly "
                         "scheduling noise, ms one run and 0 the next, and "
                         "the rate only sets the bandwidth term)")
    args = ap.parse_args()
    moe_opt = os.path.join(args.build, "bin", "moe-opt")
    moe_profile = os.path.join(args.build, "bin", "moe-profile")
    with tempfile.TemporaryDirectory() as tmp:
        rows, rho = cluster1_ratio(moe_opt, tmp)
        print("FlowMoE Cluster 1 (SIMULATED on the calibrated flowmoe-cluster1 "
              "profile), vanilla, 2 x 8 GPUs: communication / compute busy")
        for name, r in rows.items():
            print(f"  {name:16s} {r:5.2f}")
        print(f"  geometric mean   {rho:5.2f}  <- target")
        cluster = (cl.Cluster(args.cluster, existing=True) if args.cluster else
                   cl.Cluster("mrate", ranks_per_node=args.ranks_per_node,
                              rate=args.probe_rate))
        try:
            profile, report = cl.measure_profile(
                cluster, moe_profile, os.path.join(tmp, "probe.json"))
        finally:
            cluster.down()
        print(f"\nmeasured profile on the emulated cluster ({cluster.describe()}):")
        print("\n".join("  " + l for l in report.strip().splitlines()[1:]))
        step = trainer_model(moe_opt, cluster.grid, tmp)
        probe = cl.tc_rate_bytes(cluster.rate)

        def ratio(rate):
            prof = scaled_profile(profile, probe / rate,
                                  os.path.join(tmp, "scaled.json"),
                                  args.keep_alpha)
            r = cl.simulate(moe_opt, step, prof)
            return r["comm_busy_us"] / r["compute_busy_us"], r

        lo, hi = math.log(probe / 64), math.log(probe * 64)
        for _ in range(30):  # the ratio falls as the rate grows
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if ratio(math.exp(mid))[0] > rho else (lo, mid)
        rate = math.exp((lo + hi) / 2)
        got, r = ratio(rate)
        at_probe = ratio(probe)[0]
        print(f"\nthe trainer (vanilla, grid {cluster.grid}) on it [simulated "
              f"on the measured profile]: comm / compute {at_probe:.2f} at "
              f"{cluster.rate}")
        print(f"rate for rho = {rho:.2f}: {rate * 8 / 1e6:.0f} Mbit/s "
              f"(compute {r['compute_busy_us'] / 1e3:.1f} ms, communication "
              f"{r['comm_busy_us'] / 1e3:.1f} ms per step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
