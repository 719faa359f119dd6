#!/usr/bin/env python3
"""Static SASS instruction counts per segment of the KDA intra kernel (2026-12-07).

Usage: seg.py FILE.sass [--copy full|generic|all] [--top N] [--json]

Takes the first `Function :` block (the intra kernel), finds the full-chunk branch (`ISETP.NE.AND Px, PT, Rx,
0x20` then `@!Px BRA addr`: the copy with len == C starts at addr; FULLC=1) and splits the chosen copy at
`BAR.SYNC` (segment i ends at barrier i; the last segment runs to the first EXIT after the last barrier).
Counts are static (a loop's body counts once); backward branches are reported per segment.
"""
import re, sys, json, collections

INT = {"IMAD", "IADD3", "LOP3", "SHF", "ISETP", "LEA", "VIADD", "SEL", "MOV", "PRMT", "IABS", "IMNMX", "VIMNMX",
       "I2F", "F2I", "FLO", "POPC", "BMSK", "SGXT", "ULDC", "UIADD3", "ULOP3", "UIMAD", "USHF", "UMOV", "USEL",
       "ULEA", "UISETP", "S2R", "S2UR", "CS2R", "LDC", "IMUL", "PLOP3", "P2R", "R2P", "R2UR", "USGXT", "UPRMT",
       "IDP", "BREV", "UFLO", "UPOPC", "VOTEU", "VOTE", "ISCADD", "IMNMX"}
FP = {"FFMA", "FMUL", "FADD", "FSEL", "FSETP", "MUFU", "F2F", "FMNMX", "HADD2", "HMUL2", "HFMA2", "FCHK", "F2FP",
      "FRND", "DADD", "DMUL", "DFMA", "FSWZADD", "I2FP", "F2IP", "HSETP2", "HMNMX2"}
MEM = {"LDS", "STS", "LDG", "STG", "LDSM", "SHFL", "LDGSTS", "LDGDEPBAR", "DEPBAR", "LDL", "STL", "LD", "ST",
       "ATOMS", "RED", "ATOM", "STSM", "LDC"}
CTL = {"BRA", "BSSY", "BSYNC", "EXIT", "CALL", "RET", "WARPSYNC", "BAR", "NOP", "YIELD", "BMOV", "JMP"}

LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*([^;]*);")


def parse(path):
    lines = open(path).read().split("\n")
    out, inside = [], False
    for ln in lines:
        if "Function :" in ln:
            if inside:
                break
            inside = True
            continue
        if not inside:
            continue
        m = LINE.search(ln)
        if m:
            out.append((int(m.group(1), 16), m.group(2) or "", m.group(3), m.group(4).strip()))
    return out


def klass(op):
    base = op.split(".")[0]
    if base == "HMMA":
        return "hmma"
    if base == "LDC":
        return "int"
    if base in MEM:
        return "mem"
    if base in CTL:
        return "ctl"
    if base in FP:
        return "fp"
    if base in INT or base.startswith("U"):
        return "int"
    return "other"


def segments(ins, copy):
    split = None
    for i, (a, pred, op, args) in enumerate(ins):
        if op.startswith("ISETP.NE") and re.search(r",\s*0x20,\s*PT$", args):
            p = args.split(",")[0].strip()
            for a2, pred2, op2, args2 in ins[i + 1:i + 12]:
                if op2 == "BRA" and pred2.strip() == f"@!{p}":
                    split = int(args2.split()[0], 16)
                    break
        if split is not None:
            break
    if copy == "all" or split is None:
        body = ins
    elif copy == "full":
        body = [x for x in ins if x[0] >= split]
    else:
        body = [x for x in ins if x[0] < split]
    segs, cur = [], []
    for x in body:
        cur.append(x)
        if x[2].startswith("BAR.SYNC"):
            segs.append(cur)
            cur = []
    # Tail: to the first EXIT (subroutines follow it).
    tail = []
    for x in cur:
        tail.append(x)
        if x[2] == "EXIT" and not x[1]:
            break
    segs.append(tail)
    return segs, split


def main():
    args = sys.argv[1:]
    path = args[0]
    copy = args[args.index("--copy") + 1] if "--copy" in args else "full"
    top = int(args[args.index("--top") + 1]) if "--top" in args else 6
    ins = parse(path)
    segs, split = segments(ins, copy)
    rows = []
    for i, s in enumerate(segs):
        c = collections.Counter(klass(x[2]) for x in s)
        ops = collections.Counter(x[2].split(".")[0] for x in s)
        back = sum(1 for x in s if x[2] == "BRA" and int(x[3].split()[0], 16) <= x[0])
        rows.append(dict(seg=i, n=len(s), int=c["int"], fp=c["fp"], mem=c["mem"], ctl=c["ctl"], hmma=c["hmma"],
                         mufu=ops["MUFU"], back=back, top=ops.most_common(top)))
    if "--json" in args:
        print(json.dumps(rows))
        return
    print(f"copy={copy} split=0x{split or 0:x} segments={len(segs)}")
    print("| seg | instr | int | fp | mem | ctl | HMMA | MUFU | loops | top opcodes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    tot = collections.Counter()
    for r in rows:
        tops = " ".join(f"{o} {n}" for o, n in r["top"])
        print(f"| {r['seg']} | {r['n']} | {r['int']} | {r['fp']} | {r['mem']} | {r['ctl']} | {r['hmma']} | {r['mufu']} | {r['back']} | {tops} |")
        for k in ("n", "int", "fp", "mem", "ctl", "hmma", "mufu", "back"):
            tot[k] += r[k]
    print(f"| all | {tot['n']} | {tot['int']} | {tot['fp']} | {tot['mem']} | {tot['ctl']} | {tot['hmma']} | {tot['mufu']} | {tot['back']} | |")


if __name__ == "__main__":
    main()
