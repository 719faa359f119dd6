#!/usr/bin/env bash
# Session 16, device call 6: deeper prefetch for the latent GEMM. With wgmma keeping one k-step in flight, a 4-slot
# ring of 48 KiB stages prefetches only two k-steps (~1 us) ahead; smaller tiles buy more slots in the same shared
# memory: BN=192 with 5 stages, BN=128 with 6 (with and without the bulk-store epilogue), against the defaults and
# STORE=tma on the five presets; torch._grouped_mm in the same call. (Both new points spill 16 bytes, stores only,
# in ptxas's report: explored, not eligible for the tuner.)
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=330 bash lab/plans/session16-call6.sh  (carry [".carry"], timeout_s 350)
W=/tmp/w16f; source lab/plans/lib.sh
D="AHEAD=auto,BK=64,BM=128,BN=256,LOAD=auto,MMA=wgmma,OVERLAP=on,PRODUCER=warp,RASTER=m,STAGES=4,WM=8,WN=1"
V="$D;$D,STORE=tma;$D,BN=192,STAGES=5;$D,BN=128,STAGES=6;$D,BN=128,STAGES=6,STORE=tma"
op latent_moe_gemm 250 70 --preset "G28 mean1024 K3584 N6144;G28 mean1024 K3072 N3584;G56 mean64 K3584 N6144;G28 mean256 K3584 N6144;G28 mean256 K3584 N6144 situ_glu+p" --knobs "$V"
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
python3 - $W/b <<'PY'
import json, glob, sys
keys = ("STORE", "BN", "STAGES")
for f in sorted(glob.glob(sys.argv[1] + "/*/*/*.json")):
    if "peers" in f: continue
    for r in json.load(open(f)).get("rows", []):
        vs = " | ".join("%s %.4f" % (",".join(f"{k}={v}" for k, v in kn.items() if k in keys and not (k in ("BN", "STAGES") and str(v) in ("256", "4"))) or "default", ms) for kn, ms in r.get("variants", []))
        print(f"{r['preset'][:30]:30} peer {r.get('peer_ms') or 0:.4f} | {vs}")
PY
