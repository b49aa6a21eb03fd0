"""What the benchmarks on the emulated cluster share (bench/measured_policies.py,
bench/cluster_rate.py): bringing a cluster up and down
(scripts/emulated-cluster.sh), measuring its profile (moe-profile), building
models and scheduled steps (gen_model_mlir.py, make_model.py, moe-opt), the
simulator's prediction (moe-opt --moe-simulate), and timing a training run
from its loss lines.

Every tool is used through its command line only (moe-run, moe-opt,
moe-profile, the peer), so the benchmarks keep working when the tools'
insides change.
"""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CLUSTER_SH = os.path.join(ROOT, "scripts", "emulated-cluster.sh")
GEN = os.path.join(ROOT, "python", "gen_model_mlir.py")
MAKE_TRAINER = os.path.join(ROOT, "examples", "trainer", "make_model.py")
PEER = os.path.join(ROOT, "python", "torch_moe_peer.py")
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's torch for the ONNX export, the peer
TEXT = os.path.join(ROOT, "examples", "data", "moe-notes.txt")


def run(cmd, stdin=None, env=None, timeout=None):
    """Runs cmd, returns stdout; exits naming the command when it fails."""
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                       env=env, timeout=timeout)
    if p.returncode:
        sys.exit(f"error: {' '.join(cmd[:4])} ... exited {p.returncode}:\n"
                 f"{p.stderr[-3000:]}{p.stdout[-1000:]}")
    return p.stdout


def tc_rate_bytes(rate):
    """Bytes/s of a tc rate ("800mbit", "1gbit", "50mbps")."""
    m = re.fullmatch(r"(\d+)(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)", rate.lower())
    if not m:
        sys.exit(f"error: rate '{rate}': expected e.g. 800mbit")
    n, unit = int(m.group(1)), m.group(2)
    scale = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8,
             "bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}[unit]
    return n * scale


class Cluster:
    """An emulated cluster: one this object brings up (and down), or one
    that is up already (`existing`)."""

    def __init__(self, name, nodes=2, ranks_per_node=1, rate=None,
                 existing=False):
        self.name, self.existing = name, existing
        if not existing:
            args = [CLUSTER_SH, "up", "--name", name, "--nodes", str(nodes),
                    "--ranks-per-node", str(ranks_per_node)]
            if rate:
                args += ["--rate", rate]
            run(args)
        state = {}
        with open(os.path.join(os.environ.get("MOE_CLUSTER_STATE_DIR",
                                              "/run/moe-cluster"),
                               f"{name}.env")) as f:
            for line in f:
                if "=" in line and not line.startswith("#"):
                    k, v = line.strip().split("=", 1)
                    state[k] = v.strip('"')
        self.nodes = len(state["MOEC_NODES"].split())
        self.ranks_per_node = int(state["MOEC_RANKS_PER_NODE"])
        self.rate = state["MOEC_RATE"]
        self.subnet = state["MOEC_SUBNET"]

    @property
    def ranks(self):
        return self.nodes * self.ranks_per_node

    @property
    def grid(self):
        return f"{self.nodes}x{self.ranks_per_node}"

    def mpirun(self, program):
        return [CLUSTER_SH, "mpirun", "--name", self.name, *program]

    def down(self):
        if not self.existing:
            subprocess.run([CLUSTER_SH, "down", "--name", self.name, "--kill"],
                           capture_output=True)

    def describe(self):
        return (f"{self.nodes} nodes x {self.ranks_per_node} ranks, "
                f"{self.rate} per NIC (tbf), subnet {self.subnet}")


def measure_profile(cluster, moe_profile, out, max_bytes=4 << 20):
    """moe-profile on the cluster's ranks; returns the profile (dict) and
    its report (stderr)."""
    p = subprocess.run(cluster.mpirun([moe_profile, "-o", out, "--name",
                                       f"emulated-{cluster.grid}-{cluster.rate}",
                                       "--min-bytes", "4096",
                                       "--max-bytes", str(max_bytes)]),
                       capture_output=True, text=True, timeout=1800)
    if p.returncode:
        sys.exit(f"error: moe-profile on the cluster failed:\n{p.stderr[-3000:]}")
    with open(out) as f:
        return json.load(f), p.stderr


def expected_a2a_beta(cluster):
    """The β (us/B) that the tc rate alone gives moe-profile's inter-node
    all-to-all, which is fitted per byte that leaves a node (each rank
    sends (P-K)/P of its buffer off its node; the K ranks of a node share
    its NIC): K / rate."""
    return cluster.ranks_per_node / tc_rate_bytes(cluster.rate) * 1e6


def simulate(moe_opt, step, profile, extra=""):
    """The simulator's prediction for a scheduled step (a dict); `extra`:
    more --moe-simulate options (routing-trace=F routing-step=S)."""
    out = run([moe_opt, step,
               f"--moe-simulate=profile={profile} json=true {extra}".strip(),
               "-o", os.devnull])
    return json.loads(out[out.index("["):])[0]


def schedule(moe_opt, model, pipeline, out):
    """moe-opt MODEL PIPELINE-ARGS -o OUT (the pipeline's report, if any,
    is returned: chunk-bytes=auto prints the chosen S_p)."""
    return run([moe_opt, model, *pipeline, "-o", out])


class RunFailed(Exception):
    """A timed run that exited non-zero, ran too long or printed too few
    loss lines; the message says which, with the end of its stderr."""


def timed_run(cmd, steps, timeout, skip=2, env=None):
    """Runs a trainer that prints "step s loss L" once per step; returns
    (per-step seconds, losses). A step's time is the gap between its loss
    line and the previous one as they arrive here, so start-up (MPI, weight
    loading) is never counted; the first `skip` steps (warm-up: page
    faults, connection set-up) are dropped."""
    stamps, losses = [], []
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, bufsize=1, start_new_session=True, env=env)
    deadline = time.monotonic() + timeout
    try:
        for line in p.stdout:
            if line.startswith("step "):
                stamps.append(time.perf_counter())
                losses.append(float(line.split()[3]))
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(cmd, timeout)
        err = p.stderr.read()
        p.wait(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait()
        raise RunFailed(f"{' '.join(cmd[-8:])} ran past {timeout} s")
    if p.returncode or len(losses) != steps:
        raise RunFailed(f"{' '.join(cmd[-10:])} exited {p.returncode} after "
                        f"{len(losses)} of {steps} steps:\n{err[-3000:]}")
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return gaps[max(0, skip - 1):], losses


def median(xs):
    return statistics.median(xs) if xs else float("nan")
