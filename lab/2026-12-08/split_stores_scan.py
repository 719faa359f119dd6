#!/usr/bin/env python3
# Which kernels of the benchmark presets (default knobs) have a 16-byte global store split into four 4-byte STG.E
# (offsets +0, +4, +8, +12 of one base register). Run from the repository root with K3K_NVRTC / K3K_PTXAS set and
# cuobjdump or nvdisasm installed (scripts/install-cuda-tools.sh --sass). 2026-12-08: 53 kernels, three split (the
# kda intra kernels: plain safe, exact, FlashKDA options), each at its Qbar / Kbar row stores.
import re, subprocess, sys
ops = ["latent_moe_gemm","mxfp4_matmul","mx.quantize","mx.dequantize","gated_mla.prefill","gated_mla.decode","gated_mla.gate","hist_quantile.qb","hist_quantile.column","kda","kda.decode"]
def presets(op):
    out = subprocess.run(["./target/release/k3k","list"],capture_output=True,text=True).stdout
    sec = out.split("\n"+op+"\n")[1] if ("\n"+op+"\n") in out else out.split(op+"\n",1)[1]
    ps=[]; on=False
    for l in sec.splitlines():
        if l.strip().startswith("benchmark presets"): on=True; continue
        if on:
            if not l.startswith("    "): break
            ps.append(l.strip().split(" --dims")[0].strip())
    return ps
seen=set()
for op in ops:
    for p in presets(op):
        s = subprocess.run(["./target/release/k3k","emit","--op",op,"--preset",p,"--emit","sass"],capture_output=True,text=True).stdout
        for fn in re.split(r"\n\s*Function : ", s)[1:]:
            name = fn.split("\n",1)[0].strip()
            if name in seen: continue
            seen.add(name)
            split = 0
            plain = [(r,int(o or "0",16)) for r,o in re.findall(r"STG\.E\s+desc\[\w+\]\[(R\d+)\.64(?:\+0x([0-9a-f]+))?\]", fn)]
            bases = {}
            for r,o in plain: bases.setdefault(r,set()).add(o)
            for r,os_ in bases.items():
                for b in os_:
                    if b % 16 == 0 and {b+4,b+8,b+12} <= os_: split += 1
            if split: print(f"{op:22s} {split:3d} split 16-byte stores  {name[:110]}")
print("kernels scanned:", len(seen))
