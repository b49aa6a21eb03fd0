#!/usr/bin/env python3
"""Remove every op of one kind from printed moe IR, for negative tests.

  ir_drop_op.py moe.sigmoid_gate --keep 2 in.mlir > out.mlir

Each `%r = OP ...` line is deleted and later uses of %r (up to the end of
its region, the next `moe.yield` / `return`) read the op's operand number
KEEP instead (0-based, in textual order: for `moe.sigmoid_gate %x, %w
scales %s`, 2 is %s). Function arguments no other op reads any more are
dropped from the signature and the later ones renumbered, so the result
is still a valid step whose every parameter influences the loss (what
moe-build-train-step requires). Works on the single-function IR moe-opt
prints for an imported model.
"""
import argparse
import re
import sys


def drop_op(text, op, keep):
    lines, out, subst = text.split("\n"), [], {}
    pat = re.compile(r"^\s*(%[\w]+) = " + re.escape(op) + r" (.*?) :")
    for line in lines:
        m = pat.match(line)
        if m:
            operands = re.findall(r"%[\w]+", m.group(2))
            subst[m.group(1)] = operands[keep]
            continue
        for r, s in subst.items():
            line = re.sub(re.escape(r) + r"(?![\w])", s, line)
        if re.search(r"\b(moe\.yield|return)\b", line):
            subst = {}
        out.append(line)
    return "\n".join(out)


def drop_unused_args(text):
    start = text.index("func.func")
    split = text.index("\n", start) + 1  # the signature is one line
    head, body = text[:split], text[split:]
    used = set(re.findall(r"%arg(\d+)\b", body))
    declared = [int(a) for a in re.findall(r"%arg(\d+):", head)]
    for a in sorted((a for a in declared if str(a) not in used),
                    reverse=True):
        # `%argA: type {attrs}, ` (attribute dicts hold no braces).
        head = re.sub(r"%arg" + str(a) + r": [^{,]*(\{[^}]*\})?(, )?", "",
                      head, count=1)
        renum = lambda m: f"%arg{int(m.group(1)) - (int(m.group(1)) > a)}"
        head = re.sub(r"%arg(\d+)\b", renum, head)
        body = re.sub(r"%arg(\d+)\b", renum, body)
    return head.replace(", )", ")") + body


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("op")
    ap.add_argument("--keep", type=int, required=True)
    ap.add_argument("input")
    args = ap.parse_args()
    with open(args.input) as f:
        text = f.read()
    out = drop_op(text, args.op, args.keep)
    if out == text:
        sys.exit(f"ir_drop_op.py: no {args.op} in {args.input}")
    sys.stdout.write(drop_unused_args(out))


if __name__ == "__main__":
    main()
