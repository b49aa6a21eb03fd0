"""Prints how much longer each dispatch / combine task (and vjp) is in the
second --moe-trace timeline than in the first (rank 0), in microseconds."""
import json
import sys


def took(path):
    events = json.load(open(path))["traceEvents"]
    return {e["name"]: e["dur"] for e in events
            if e["ph"] == "X" and e["pid"] == 0 and e["name"][0] in "CD"}


base, other = took(sys.argv[1]), took(sys.argv[2])
for name in sorted(base):
    print(f"{name} +{other[name] - base[name]:.0f}")
