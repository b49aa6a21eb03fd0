"""Stops one rank of a running MPI job with SIGSTOP and reports how the
other ranks end: the job must end within a bound (no hang), non-zero, and
every surviving rank's error must name the stopped rank.

  stall_rank.py --mpirun "mpirun ..." --ranks 4 --stop 3 --bound 90 -- \
      moe-run step.mlir --steps 100000 --timeout 10

The stopped rank is found by its OMPI_COMM_WORLD_RANK among the job's
processes once rank 0 has printed its first loss line; it is continued and
killed at the end whatever happens. Prints one line per surviving rank
("rank R: <its error line>", or "rank R: no error") and "exit N after S s".
"""
import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time


def job_processes(root):
    """(pid, world rank) of every process below `root` with an MPI rank."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            todo.append(child)
            try:
                with open(f"/proc/{child}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            for var in env:
                if var.startswith(b"OMPI_COMM_WORLD_RANK="):
                    found.append((child, int(var.split(b"=", 1)[1])))
    return found


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mpirun", required=True)
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--stop", type=int, required=True)
    p.add_argument("--bound", type=float, required=True)
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    argv = shlex.split(a.mpirun) + ["-np", str(a.ranks)] + command
    job = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    stderr = []
    reader = threading.Thread(target=lambda: stderr.extend(job.stderr))
    reader.start()
    stopped = None
    try:
        # The first loss line: every rank has run a step.
        for line in job.stdout:
            if line.startswith("step 1 loss"):
                break
        else:
            sys.exit("the job ended before its first step:\n" + "".join(stderr))
        ranks = dict((r, pid) for pid, r in job_processes(job.pid))
        if a.stop not in ranks:
            sys.exit(f"rank {a.stop} not found among {sorted(ranks)}")
        stopped = ranks[a.stop]
        os.kill(stopped, signal.SIGSTOP)
        start = time.monotonic()
        threading.Thread(target=lambda: [None for _ in job.stdout]).start()
        try:
            rc = job.wait(timeout=a.bound)
        except subprocess.TimeoutExpired:
            rc = None
        elapsed = time.monotonic() - start
    finally:
        if stopped is not None:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(stopped, sig)
                except ProcessLookupError:
                    pass
        if job.poll() is None:
            job.kill()
            job.wait()
        reader.join(timeout=10)
    errors = [l.rstrip("\n") for l in stderr if "error:" in l]
    for r in range(a.ranks):
        if r == a.stop:
            continue
        mine = [l for l in errors if f"error: rank {r}:" in l]
        print(f"rank {r}: {mine[0] if mine else 'no error'}")
    if rc is None:
        print(f"hang: still running after {a.bound:.0f} s")
    else:
        print(f"exit {'non-zero' if rc != 0 else 'zero'} within {a.bound:.0f} s"
              f" ({elapsed:.0f} s)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
