#!/usr/bin/env bash
# Session 14, device call 4: mxfp4_matmul at M64 (0.76x cuBLAS, the worst row of the status table), a focused sweep
# of the tile path around the tuned record (BK=256 BN=64 SPLIT=1: 96 CTAs of 4 warps on 132 SMs, 252 registers,
# 164 KB of stages, one CTA per SM): k-splits finished by the last CTA (more CTAs, less K each), shallower and
# deeper stages, 32-token tiles, 32-row tiles. Every variant in the same run, cuBLAS in the same call; `k3k check
# --backend cuda` of the new points first.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=300 bash lab/plans/session14-call4.sh  (carry [".carry"], timeout_s 330)
W=/tmp/w14d; source lab/plans/lib.sh
R="BK=256,BN=64,PATH=tile,SPLIT=1"
V="$R;PATH=tile,BK=128,BN=64,STAGES=4,SPLIT=2,FIN=last;PATH=tile,BK=128,BN=64,STAGES=3,SPLIT=3,FIN=last;PATH=tile,BK=256,BN=64,STAGES=2,SPLIT=2,FIN=last;PATH=tile,BK=128,BN=32,WA=2,STAGES=4,SPLIT=1;PATH=tile,BK=128,BN=64,STAGES=4,SPLIT=1;PATH=tile,BK=128,BN=128,WA=8,STAGES=3,SPLIT=2,FIN=last;PATH=tile,BK=64,BN=64,STAGES=6,SPLIT=2,FIN=last;PATH=tile,BM=32,BK=128,BN=64,STAGES=4,SPLIT=1;PATH=tile,BM=32,BK=256,BN=64,SPLIT=1"
IFS=';' read -ra VS <<< "$V"
for kn in "${VS[@]:1}"; do
  timeout 30 $K check --backend cuda --op mxfp4_matmul --knobs "$kn" --cases 3 >> $OUT/check.txt 2>&1; echo "check $kn rc=$?" >> $L
done
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -5 >> $L
op mxfp4_matmul 120 60 --preset "MXFP4 linear M64 N6144 K3584;MXFP4 linear M64 N6144 K3584 natural" --knobs "$V"
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
python3 - $W/b <<'PY'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/*/*/*.json")):
    for r in json.load(open(f)).get("rows", []):
        print(r["preset"], "peer", r.get("peer_ms"))
        for kn, ms in r.get("variants", []):
            print("   %.4f  %s" % (ms, ",".join(f"{k}={v}" for k, v in kn.items() if k in ("PATH","BM","BK","BN","WA","STAGES","SPLIT","FIN"))))
PY
