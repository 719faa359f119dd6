#!/usr/bin/env bash
# Session 16, device call 4: the latent GEMM's fixed cost per tile (epilogue, tile switch), from a K sweep at
# G28 mean1024 N6144 (K = 64, 256, 1024, 3584: time = tiles x (fixed + K/64 x step) / 132 blocks), ours at the
# defaults and at STAGES=3 (what a 64 KiB staging buffer for a bulk-store epilogue would cost the main loop),
# torch._grouped_mm in the same call.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=300 bash lab/plans/session16-call4.sh  (carry [".carry"], timeout_s 320)
W=/tmp/w16d; source lab/plans/lib.sh
D="AHEAD=auto,BK=64,BM=128,BN=256,LOAD=auto,MMA=wgmma,OVERLAP=on,PRODUCER=warp,RASTER=m,STAGES=4,WM=8,WN=1"
op latent_moe_gemm 200 80 --dims "G=28,mean=1024,K=64,N=6144;G=28,mean=1024,K=256,N=6144;G=28,mean=1024,K=1024,N=6144;G=28,mean=1024,K=3584,N=6144" --knobs "$D;$D,STAGES=3"
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
python3 - $W/b <<'PY'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/*/*/*.json")):
    if "peers" in f: continue
    for r in json.load(open(f)).get("rows", []):
        vs = " | ".join("%s %.4f" % (",".join(f"{k}={v}" for k, v in kn.items() if k in ("STAGES",)), ms) for kn, ms in r.get("variants", []))
        print(f"{r['preset'][:40]:40} peer {r.get('peer_ms') or 0:.4f} | {vs}")
PY
