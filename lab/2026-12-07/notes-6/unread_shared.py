#!/usr/bin/env python3
"""Shared buffers that a kernel only ever writes (a copy or store destination, never read), over the default kernels
of every preset in results/nvidia-h200/fingerprints.txt, from the printed IR (`k3k emit --emit ir`).
usage: python3 lab/2026-12-07/notes-6/unread_shared.py BINARY [BINARY ...]   (NVRTC not needed)
2026-12-07: the binary of 2a45191 finds one, the kda intra kernel's sBias under IMAP=gate; 0ee26d6 finds none
(53 distinct default kernels)."""
import collections, re, subprocess, sys

pres = sorted({tuple(l.split("\t")[:2]) for l in open("results/nvidia-h200/fingerprints.txt")
               if not l.startswith("#") and "\t" in l})
for binary in sys.argv[1:]:
    seen, found = set(), collections.defaultdict(set)
    for op, p in pres:
        out = subprocess.run([binary, "emit", "--op", op, "--preset", p, "--emit", "ir"], capture_output=True, text=True).stdout
        for kern in re.split(r"\n(?=kernel )", out):
            m = re.match(r"kernel (\S+)", kern)
            if not m or m.group(1) in seen:
                continue
            seen.add(m.group(1))
            for s in re.findall(r"^\s*shared (\w+):", kern, re.M):
                uses = [l for l in kern.split("\n") if re.search(r"\b" + s + r"\b", l) and not re.match(r"\s*shared " + s + ":", l)]
                reads = [l for l in uses if not re.match(r"\s*" + s + r"\[[^\]]*\](\[[^\]]*\])?\s*(<~|<-|=)", l)]
                if not reads:
                    found[m.group(1)].add(s + ("" if uses else " (never used)"))
    print(f"{binary}: {len(seen)} kernels, {len(found)} with a shared buffer never read")
    for k, v in found.items():
        print(f"  {k}: {sorted(v)}")
