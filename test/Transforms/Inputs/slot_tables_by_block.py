"""Checks that every op of a step scheduled with expert-placement=1 reads
its own block's expert_slots.<block> input: the forward ops name the
input, each vjp binds it as a primal; both carry moe.task's block on the
same line. Prints how many reads were checked, or the first mismatch.

  slot_tables_by_block.py STEP.mlir
"""
import re
import sys

text = open(sys.argv[1]).read()
tables = dict(re.findall(
    r'(%arg\d+): tensor<\d+x\d+xi64> \{moe\.step_input = "expert_slots\.(\d+)"\}',
    text))
if not tables:
    sys.exit("error: no expert_slots.<block> input")
reads = 0
for line in text.splitlines():
    block = re.search(r'moe\.task<[^>]*block = (\d+)', line)
    if not block:
        continue
    for a, b in re.findall(r'expert_slots\((%arg\d+)\)|= (%arg\d+) : tensor<',
                           line):
        arg = a or b
        if arg not in tables:
            continue
        reads += 1
        if tables[arg] != block.group(1):
            sys.exit(f"error: an op of block {block.group(1)} reads "
                     f"expert_slots.{tables[arg]}: {line.strip()[:160]}")
print(f"{len(tables)} tables, {reads} reads, each by its own block")
