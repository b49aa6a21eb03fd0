"""Reads moe-run --profile's stderr: every profile line has one of the
documented forms, every (rank, step) has a wall line, and each stream's
busy + idle equals its step's wall time."""
import re
import sys

WALL = re.compile(r"^profile rank (\d+) step (\d+) wall_us (\d+)$")
OP = re.compile(r"^profile rank (\d+) step (\d+) op (\S+) tasks (\d+) us (\d+)$")
STREAM = re.compile(
    r"^profile rank (\d+) step (\d+) stream (\S+) busy_us (\d+) idle_us (\d+)$")
walls, streams = {}, []
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if not line.startswith("profile "):
        continue
    if m := WALL.match(line):
        walls[(m[1], m[2])] = int(m[3])
    elif m := STREAM.match(line):
        streams.append(((m[1], m[2]), int(m[4]) + int(m[5])))
    elif not OP.match(line):
        sys.exit(f"bad profile line: {line}")
for key, total in streams:
    if walls.get(key) != total:
        sys.exit(f"rank {key[0]} step {key[1]}: busy + idle {total} != wall "
                 f"{walls.get(key)}")
ranks = {r for r, _ in walls}
print(f"{len(walls)} steps of {len(ranks)} ranks: busy + idle = wall on "
      "every stream")
