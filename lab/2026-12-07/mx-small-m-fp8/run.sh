#!/bin/bash
# Issue 45, MMA=f8sync (lab/2026-12-07/mx-small-m-fp8.md): MXFP4 weights x MXFP8 activations on E4M3 mma.sync,
# activations never dequantized, at N6144 K3584 packed weights, M = 8..256. (1) the defaults (MMA=auto) and
# MMA=f8sync at its automatic knobs at every M, then cuBLAS bf16 and torch._scaled_mm FP8 rowwise on the same rows
# (scripts/peers.py, same run), merged into the report; (2) f8sync candidates (BN, SPLIT, STAGES, BK) at M 32, 64,
# 128; (3) natural-layout weights at M64 (the packed conversion costs ~3x the natural one's integer ops). Every k3k
# row is checked against the f64 reference by `k3k bench` (a failing set has no time). <= 150 s of GPU time, from
# the repository root with the stripped release binary of branch i45s carried:
#   bash lab/2026-12-07/mx-small-m-fp8/run.sh     (carry: [".dev/bin/k3k"]; $OUT: table.txt, bench.txt, log.txt,
#   reports.tgz)
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=${K3K_NVRTC:-/usr/local/cuda/lib64/libnvrtc.so.13}
export K3K_PTXAS=${K3K_PTXAS:-/usr/local/cuda/bin/ptxas}
OUT=${OUT:-/tmp/mx-small-m-fp8-out}
mkdir -p "$OUT"
W=/tmp/mx-small-m-fp8; rm -rf $W; mkdir -p $W
B=.dev/bin/k3k; L=$OUT/log.txt; HERE=lab/2026-12-07/mx-small-m-fp8
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
# After every step: the reports, the bench lines and the table into $OUT (a call cut short keeps what ran).
save() { tar czf $OUT/reports.tgz -C $W . 2>/dev/null; cat $W/*.txt > $OUT/bench.txt 2>/dev/null
  python3 $HERE/table.py $W > $OUT/table.txt 2>&1; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $L
BENCH="bench --op mxfp4_matmul --window-ms 100"
dims() { local d="" p=$1; shift; for m in "$@"; do d="$d${d:+;}M=$m,N=6144,K=3584,act=1,packed=$p"; done; echo "$d"; }
# 1. defaults and f8sync (auto knobs) at every M, then the peers on those rows, merged.
timeout 45 $B $BENCH --dims "$(dims 1 8 16 32 64 128 256)" --knobs "MMA=auto;MMA=f8sync" --out $W/sweep \
  > $W/sweep.txt 2>&1; log "sweep rc=$?"
save
SLUG=$(ls $W/sweep | head -1)
timeout 35 python3 scripts/peers.py $W/sweep/$SLUG --out $W/peers.json > $W/peers.log 2>&1; log "peers rc=$?"
$B bench --merge-peers $W/peers.json --out $W/sweep >> $W/sweep.txt 2>&1
save
# 2. f8sync candidates: the split (CTAs per SM vs the staged activations' shared memory), wider weight tiles (half
#    the activation re-reads from L2), the ring depth, a longer K step.
#    (Values the CLI accepts: SPLIT 1|2|4|8|16, STAGES 3|4, BK 64..512, BN 32..256, WA 4|8, MINB 2|3|4|6.)
C="MMA=f8sync,SPLIT=2;MMA=f8sync,SPLIT=4;MMA=f8sync,SPLIT=8;MMA=f8sync,BN=128,WA=8;MMA=f8sync,BN=128,WA=8,SPLIT=4"
C="$C;MMA=f8sync,STAGES=3;MMA=f8sync,BK=256,STAGES=3;MMA=f8sync,BK=64,SPLIT=8"
#    Register caps (uncapped 238-255 registers, two CTAs per SM): MINB=3 (168; at M64 ptxas spills 8 bytes).
C="$C;MMA=f8sync,MINB=3;MMA=f8sync,BK=64,SPLIT=8,MINB=3"
timeout 45 $B $BENCH --dims "$(dims 1 64 32)" --knobs "$C" --out $W/cand > $W/cand.txt 2>&1; log "cand M64 M32 rc=$?"
save
timeout 15 $B $BENCH --dims "$(dims 1 128)" --knobs "MMA=f8sync,BM=64;MMA=f8sync,SPLIT=4;MMA=f8sync,BM=64,BN=128,WA=8;MMA=f8sync,BM=64,SPLIT=8" \
  --out $W/cand128 > $W/cand128.txt 2>&1; log "cand M128 rc=$?"
save
# 3. natural-layout weights at M64 (cheaper E4M3 conversion).
timeout 10 $B $BENCH --dims "$(dims 0 64)" --knobs "MMA=auto;MMA=f8sync" --out $W/natural > $W/natural.txt 2>&1
log "natural M64 rc=$?"
save
cat $OUT/table.txt
log end
