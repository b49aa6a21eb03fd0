"""Writes the malformed host_planners profiles of host-planner-profile-errors.test."""
import copy
import json
import sys

base = json.load(open(sys.argv[1]))
point = base["host_planners"]["moe.plan_placement"][0]


def with_points(points):
    p = copy.deepcopy(base)
    p["host_planners"] = {"moe.plan_placement": points}
    return p


cases = {
    "key": {**base, "host_planners": {"netmoe": [point]}},
    "empty": with_points([]),
    "array": with_points({"samples": 8}),
    "object": with_points([3]),
    "no-us": with_points([{k: v for k, v in point.items() if k != "us"}]),
    "negative-us": with_points([{**point, "us": -1}]),
    "size": with_points([{**point, "samples": "eight"}]),
    "zero-size": with_points([{**point, "nodes": 0}]),
    "no-size": with_points([{"us": 5}]),
    "duplicate": with_points([point, {**point, "us": 7}]),
}
for name, profile in cases.items():
    with open(f"{sys.argv[2]}/{name}.json", "w") as f:
        json.dump(profile, f)
