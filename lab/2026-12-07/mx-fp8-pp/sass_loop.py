"""SASS of `k3k emit --emit sass` (cuobjdump output) on stdin: every loop (a backward branch) that holds a QGMMA,
innermost first, with its instruction count and the count of FFMA, QGMMA, LDS, BAR (named-barrier turns),
WARPGROUP (arrive/wait) and SYNCS (mbarrier) instructions in it. The consumer K loop of the F8V=4/5/6 main kernel is
the innermost such loop (one 128-wide slice per iteration). Usage: k3k emit ... --emit sass | python3 sass_loop.py"""
import re, sys

funcs = {}  # kernel name -> [(address, opcode text)]
name = "?"
for ln in sys.stdin:
    f = re.search(r"Function : (\S+)", ln)
    if f:
        name = f.group(1)
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", ln)
    if m:
        funcs.setdefault(name, []).append((int(m.group(1), 16), m.group(2).strip()))
KINDS = [("FFMA", r"FFMA"), ("QGMMA", r"QGMMA"), ("LDS", r"\bLDS"), ("BAR", r"\bBAR\b"), ("WARPGROUP", r"WARPGROUP"),
         ("SYNCS", r"SYNCS")]
for name, ins in funcs.items():
  addr = {a: i for i, (a, _) in enumerate(ins)}
  loops = []
  for i, (a, t) in enumerate(ins):
    b = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", t)
    if b:
        tgt = int(b.group(1), 16)
        if tgt <= a and tgt in addr:
            body = [x for _, x in ins[addr[tgt] : i + 1]]
            if any("QGMMA" in x for x in body):
                loops.append((len(body), tgt, a, body))
  for n, s, e, body in sorted(loops):
    counts = ", ".join(f"{k} {sum(1 for x in body if re.search(r, x))}" for k, r in KINDS)
    print(f"{name} loop {s:#x}..{e:#x}: {n} instructions, {counts}")
