#!/usr/bin/env python3
"""Render a Chrome-trace timeline from `moe-opt --moe-simulate ... --moe-trace`
to a PNG: one row per stream (of one rank), tasks as bars coloured by kind
(compute, all-to-all, all-reduce chunk, host planner), FlowMoE labels on bars wide enough
to hold them.

Uses Debian's python3-matplotlib, so run it with /usr/bin/python3:
  /usr/bin/python3 python/render_trace.py trace.json -o trace.png [--rank 0]
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--title")
    args = ap.parse_args()
    try:
        with open(args.trace) as f:
            trace = json.load(f)
        events = trace["traceEvents"]
        if not isinstance(events, list) or not all(
                isinstance(e, dict) for e in events):
            raise ValueError("traceEvents must be a list of objects")
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: {args.trace}: not a Chrome trace ({e})", file=sys.stderr)
        return 1
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("error: needs matplotlib (Debian: python3-matplotlib; run with "
              "/usr/bin/python3)", file=sys.stderr)
        return 1
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"
             and e.get("pid") == args.rank}
    tasks = [e for e in events if e.get("ph") == "X"
             and e.get("pid") == args.rank]
    if not tasks:
        print(f"error: no tasks for rank {args.rank} in {args.trace}",
              file=sys.stderr)
        return 1
    colours = {"compute": "#4c72b0", "comm": "#dd8452",
               "all-reduce": "#55a868", "host": "#8172b3"}
    tids = sorted({t["tid"] for t in tasks})
    end = max(t["ts"] + t["dur"] for t in tasks) / 1000.0
    fig, ax = plt.subplots(figsize=(14, 1.2 + 0.9 * len(tids)))
    for row, tid in enumerate(tids):
        for t in (t for t in tasks if t["tid"] == tid):
            start, width = t["ts"] / 1000.0, t["dur"] / 1000.0
            ax.barh(row, width, left=start, height=0.7,
                    color=colours.get(t.get("cat"), "#8c8c8c"),
                    edgecolor="white", linewidth=0.3)
            if width > end / 60:
                ax.text(start + width / 2, row, t["name"], ha="center",
                        va="center", fontsize=6, color="white")
    ax.set_yticks(range(len(tids)))
    ax.set_yticklabels([names.get(t, f"stream {t}") for t in tids])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms, simulated)")
    ax.set_xlim(0, end * 1.01)
    model = trace.get("otherData", {}).get("model", "")
    ax.set_title(args.title or f"{model}: simulated timeline, rank {args.rank}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    ax.legend(handles, ["compute", "all-to-all", "all-reduce chunk",
                        "host planner"],
              loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}: {len(tasks)} tasks on {len(tids)} streams, "
          f"{end:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
