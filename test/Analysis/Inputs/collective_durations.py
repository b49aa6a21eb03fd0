"""Prints, for each dispatch / combine / all-reduce task (and vjp) of rank 0,
its bytes and its duration in the first --moe-trace timeline and in the
second, in microseconds: "NAME bytes B: BASE -> OTHER"."""
import json
import sys


def tasks(path):
    events = json.load(open(path))["traceEvents"]
    return {e["name"]: (e["args"]["bytes"], e["dur"]) for e in events
            if e["ph"] == "X" and e["pid"] == 0 and
            (e["name"][0] in "CD" or e["name"].startswith("AR"))}


base, other = tasks(sys.argv[1]), tasks(sys.argv[2])
for name in sorted(base):
    print(f"{name} bytes {base[name][0]:.0f}: {base[name][1]:.0f} -> "
          f"{other[name][1]:.0f}")
