#!/usr/bin/env python3
"""The loops of a kernel's SASS and their instruction mix by pipe: a static estimate of what bounds a loop,
without a GPU (2026-12-05: the 28 x 4 MXFP4 decode).

    ./scripts/install-cuda-tools.sh --sass
    PATH=.tools/cuda/nvidia/cu13/bin:$PATH k3k emit --op mxfp4_matmul --preset "..." --emit sass > k.sass
    python3 scripts/sass_loops.py k.sass [more.sass ...]

A loop is the span from a backward branch's target to the branch. The pipes are Hopper's per-scheduler ones as
far as public sources tell: `alu` (LOP3, SHF, IADD3, LEA, SEL, ISETP, PRMT, ...: 16 lanes, a warp instruction
takes 2 cycles), `fma` (IMAD, FFMA, HMUL2, HFMA2, ...), `tensor` (HMMA), `lsu` (loads, stores, LDGSTS), the
rest. One instruction issues per cycle per scheduler, so a loop of n instructions with a ALU ones needs at least
max(n, 2a) cycles per warp iteration when its scheduler runs only it.
"""
import collections
import re
import sys

ALU = set("LOP3 SHF IADD3 ISETP SEL PRMT LEA IMNMX VIMNMX FSEL PLOP3 FSETP BMSK SGXT FLO POPC IABS VIADD".split())
FMA = set("IMAD FFMA FMUL FADD HMUL2 HFMA2 HADD2 IMUL FMNMX".split())


def parse(path):
    """Instructions (address, text) and label addresses of an nvdisasm / cuobjdump listing."""
    ins, labels, pending = [], {}, []
    for line in open(path):
        lm = re.match(r"\s*(\.L_x_\d+):", line)
        if lm:
            pending.append(lm.group(1))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+([^.\s].*?);", line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        for p in pending:
            labels[p] = addr
        pending = []
        ins.append((addr, m.group(2).strip()))
    return ins, labels


def opcode(text):
    return re.sub(r"^@!?U?P[T0-9]+\s+", "", text).split()[0].split(".")[0]


def pipe(op):
    if op in ALU:
        return "alu"
    if op in FMA:
        return "fma"
    if op == "HMMA":
        return "tensor"
    if op.startswith(("LD", "ST")):
        return "lsu"
    if op.startswith("U"):
        return "uniform"
    return "other"


def loops(ins, labels):
    for addr, text in ins:
        m = re.search(r"BRA.*?(\.L_x_\d+)", text)
        if m and labels.get(m.group(1), 1 << 60) < addr:
            start = labels[m.group(1)]
            yield start, addr, [t for a, t in ins if start <= a <= addr]


for path in sys.argv[1:]:
    ins, labels = parse(path)
    print(f"{path}: {len(ins)} instructions")
    for start, end, body in sorted(loops(ins, labels), key=lambda x: x[0]):
        ops = collections.Counter(opcode(t) for t in body)
        pipes = collections.Counter(pipe(o) for o in ops.elements())
        top = ", ".join(f"{o} {n}" for o, n in ops.most_common(10))
        print(f"  loop {start:#07x}-{end:#07x}: {len(body):5} instr, alu {pipes['alu']} (2x = {2 * pipes['alu']} cycles), "
              f"fma {pipes['fma']}, tensor {pipes['tensor']}, lsu {pipes['lsu']}, other {pipes['other'] + pipes['uniform']}")
        print(f"      {top}")
