#!/bin/bash
# Issue 45, the batch sizes between decode and prefill (M 32..512, N6144 K3584, MXFP8 activations, packed weights):
# the automatic choice today (M 32..64: mma.sync 64-row tiles; M128: wgmma 128x256 with a split of 10 and a
# finalize launch; M >= 256: the whole weight matrix dequantized to bf16, then a bf16 GEMM) against the tile
# path's wgmma shapes with explicit splits and the persistent grid. Every row is checked against the f64 reference
# by `k3k bench` (a failing set has no time); cuBLAS bf16 and torch._scaled_mm on the same rows (scripts/peers.py).
# One device call, <= 200 s: bash lab/2026-12-07/mx-mid-batch/run.sh (carry [".dev/bin/k3k"]; $OUT: bench.txt,
# peers.txt, reports.tgz, log.txt, summary.txt)
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=${K3K_NVRTC:-/usr/local/cuda/lib64/libnvrtc.so.13} K3K_PTXAS=${K3K_PTXAS:-/usr/local/cuda/bin/ptxas}
OUT=${OUT:-/tmp/mx-mid-out}; mkdir -p "$OUT"
W=/tmp/mx-mid; rm -rf $W; mkdir -p $W
B=.dev/bin/k3k; L=$OUT/log.txt
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
save() { tar czf $OUT/reports.tgz -C $W . 2>/dev/null; cat $W/b-*.txt > $OUT/bench.txt 2>/dev/null; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $L
T="PATH=tile,MMA=wgmma"
SETS="MMA=auto;$T,BM=128,BN=128,SPLIT=1;$T,BM=128,BN=128,SPLIT=2;$T,BM=128,BN=128,SPLIT=4;$T,BM=128,BN=128,CPS=1"
SETS="$SETS;$T,BM=64,BN=128;$T,BM=64,BN=128,SPLIT=2;$T,BM=64,BN=128,SPLIT=4;$T,BM=128,BN=256,SPLIT=2"
SETS="$SETS;$T,BM=128,BN=64;$T,BM=64,BN=64;PATH=tile,MMA=sync,BM=64,BN=64,BK=256,SPLIT=1"
SETS="$SETS;PATH=tile,MMA=sync,BM=64,BN=64,BK=256,SPLIT=2;$T,BM=128,BN=128,SPLIT=2,XDQ=tile"
for M in 128 256 64 512 32; do
  timeout ${MB_S:-45} $B bench --op mxfp4_matmul --window-ms 80 --dims "M=$M,N=6144,K=3584,act=1,packed=1" \
    --knobs "$SETS" --out $W/r > $W/b-$M.txt 2>&1; log "M$M rc=$?"; save
done
SLUG=$(ls $W/r | head -1)
timeout 40 python3 scripts/peers.py $W/r/$SLUG --out $W/peers.json > $OUT/peers.txt 2>&1; log "peers rc=$?"
$B bench --merge-peers $W/peers.json --out $W/r >> $OUT/peers.txt 2>&1; save
# Summary: per M the default, the fastest set, the peers.
python3 - $OUT/bench.txt $W/peers.json > $OUT/summary.txt 2>&1 <<'PY'
import re, sys, json
rows = {}
for l in open(sys.argv[1]):
    m = re.match(r'\s+custom M=(\d+),\S*\s+([0-9.]+) ms rel \S+ ok \[(.*)\]', l)
    if m: rows.setdefault(int(m.group(1)), []).append((float(m.group(2)), m.group(3)))
peers = {}
try:
    for p in json.load(open(sys.argv[2])).get("rows", []):
        mm = re.search(r'M=(\d+)', json.dumps(p));
        if mm: peers.setdefault(int(mm.group(1)), []).append((p.get("peer", p.get("name", "?")), p.get("ms")))
except Exception as e: print("peers:", e)
for M in sorted(rows):
    r = sorted(rows[M]); d = [x for x in rows[M] if "MMA=auto" in x[1] and "PATH=auto" in x[1]]
    print(f"M{M}: default {d[0][0] if d else '-'}  best {r[0][0]} [{r[0][1]}]  peers {peers.get(M)}")
    for t, k in r[:5]: print(f"    {t:.4f} {k}")
PY
cat $OUT/summary.txt; log end
