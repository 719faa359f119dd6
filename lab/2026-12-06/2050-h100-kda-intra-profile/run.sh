#!/usr/bin/env bash
# Where the KDA intra kernel spends its time (issue 42): ncu full set with source counters (line info on) of k3k's
# intra kernel and of FlashKDA's prepare kernel at B1 T8192 H96 (gate form 3, every in-kernel option), plus a
# per-kernel sweep of the intra knobs. Carried: .dev (bin/k3k, peers/, whl/ not needed).
set -uo pipefail
T0=$(date +%s)
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"; W=/tmp/prof; rm -rf $W; mkdir -p $W/bench $W/sweep
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
export K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
BIN=.dev/bin/k3k; NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
L=$OUT/log.txt; log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
P1="B1 T8192 H96 K128 safe lbsigab l2 bsig h0"; P0="B1 T8192 H96 K128 safe"; P5="varlen 8x1024 H96 K128 safe lbsigab l2 bsig h0"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv >> $L
FK=$PWD/.dev/flashkda-build
( timeout 240 bash .dev/peers/build-flashkda.sh $PWD/.dev/peers/flashkda-1ce47ea-src.tgz $FK > $W/fk-build.txt 2>&1; echo $? > $W/fk.rc ) &
BUILD=$!
# 1. The generated CUDA C of the intra kernel (line numbers for the source page).
$BIN emit --op kda --preset "$P1" --emit cuda > $OUT/intra-state.cu 2>> $L; log "emit rc=$?"
# 2. ncu full, source counters, line info.
K3K_NVRTC_LINEINFO=1 timeout 150 $NCU --set full --import-source yes --clock-control none --kernel-name regex:k3k_kda_intra \
  --launch-count 1 -o $W/intra $BIN bench --op kda --preset "$P1" --reps 1 --window-ms 0 --out $W/bench > $W/ncu-intra.txt 2>&1
log "ncu intra rc=$?"
$NCU -i $W/intra.ncu-rep --page details > $OUT/intra-details.txt 2>&1
$NCU -i $W/intra.ncu-rep --page source --csv --print-source cuda > $W/intra-src-cuda.csv 2>&1
$NCU -i $W/intra.ncu-rep --page source --csv --print-source sass > $W/intra-src-sass.csv 2>&1
gzip -c $W/intra-src-cuda.csv > $OUT/intra-src-cuda.csv.gz; gzip -c $W/intra-src-sass.csv > $OUT/intra-src-sass.csv.gz
log "source pages: $(wc -l < $W/intra-src-cuda.csv) cuda lines, $(wc -l < $W/intra-src-sass.csv) sass lines"
# 3. Per-kernel times of intra knob variants (K3K_BENCH_STEPS=1 prints each kernel alone).
K3K_BENCH_STEPS=1 timeout 150 $BIN bench --op kda --preset "$P1;$P0;$P5" --window-ms 60 --out $W/sweep \
  --knobs "TSPLIT=0;W1=4;W1=16;ARENA=1;ARENA=0;CHUNK=64;OPDT=bf16;LVLDT=bf16;EX2=exact;GSWZ=xor" > $W/sweep.txt 2>&1
log "sweep rc=$?"; cp $W/sweep.txt $OUT/sweep.txt
# 4. FlashKDA prepare, full set.
for _ in $(seq 120); do kill -0 $BUILD 2>/dev/null || break; sleep 1; done
log "flashkda build rc=$(cat $W/fk.rc 2>/dev/null)"; tail -5 $W/fk-build.txt >> $L
REPORT=$(ls $W/bench/*/kda.json | head -1)
PYTHONPATH=$FK timeout 100 $NCU --set full --clock-control none --kernel-name regex:flash_kda --launch-count 2 -o $W/fk \
  python3 scripts/peer_ops/kda.py flashkda-once "$REPORT" "$P1" > $W/ncu-fk.txt 2>&1
log "ncu flashkda rc=$?"; tail -3 $W/ncu-fk.txt >> $L
$NCU -i $W/fk.ncu-rep --page details > $OUT/flashkda-details.txt 2>&1
tar czf $OUT/reps.tgz -C $W intra.ncu-rep fk.ncu-rep ncu-intra.txt ncu-fk.txt 2>/dev/null
ls -la $OUT >> $L
grep -E "^\s+step|ms rel|^  [A-Z]" $OUT/sweep.txt | head -60
grep -E "Duration|Registers Per|Achieved Occ|Warp Cycles Per Issued|Issue Slots Busy|No Eligible" $OUT/intra-details.txt | head -20
