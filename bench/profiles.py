"""Hardware profiles for the benchmarks' what-if simulations: read a preset
(profiles/NAME.json) or a file, scale bandwidth terms, write the copy that
moe-opt --moe-simulate reads. The profile format: docs/profile-format.md.
"""

import copy
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load(name_or_path):
    """A profile as a dict: a path to a file (it ends in .json), else the
    preset profiles/NAME.json. Always a fresh copy, free to edit."""
    path = name_or_path
    if not path.endswith(".json"):
        path = os.path.join(ROOT, "profiles", name_or_path + ".json")
    with open(path) as f:
        return json.load(f)


def copy_of(profile):
    """A deep copy of a loaded profile, to edit without touching it."""
    return copy.deepcopy(profile)


def scale_links(profile, kind, factor, links=None):
    """Multiplies the bandwidth term (beta_us_per_byte) of collective
    `kind`'s links by `factor`: every link, or those of `links` ("intra",
    "inter") the profile has (a one-node profile has no "inter")."""
    for name, link in profile["collectives"][kind].items():
        if links is None or name in links:
            link["beta_us_per_byte"] *= factor


def scale_gemm(profile, factor):
    """Multiplies the GEMM rate's per-flop term by `factor`."""
    profile["compute"]["gemm"]["beta_us_per_flop"] *= factor


def write(profile, path):
    """Writes `profile` to `path` (one line of JSON); returns `path`."""
    with open(path, "w") as f:
        json.dump(profile, f)
    return path
