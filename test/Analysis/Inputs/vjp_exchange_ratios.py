"""Prints each dispatch / combine vjp's simulated time over its forward's
(rank 0 of a --moe-trace timeline)."""
import json
import sys

events = json.load(open(sys.argv[1]))["traceEvents"]
took = {e["name"]: e["dur"] for e in events
        if e["ph"] == "X" and e["pid"] == 0 and e["name"][0] in "CD"}
for name in sorted(n for n in took if not n.endswith("'")):
    if name + "'" in took:
        print(f"{name}' / {name} = {took[name + chr(39)] / took[name]:.2f}")
