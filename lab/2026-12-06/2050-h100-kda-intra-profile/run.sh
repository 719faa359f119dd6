#!/usr/bin/env bash
# Where the KDA intra kernel spends its time (issue 42): ncu full set with source counters (line info on) of k3k's
# intra kernel at B1 T8192 H96 (gate form 3, every in-kernel option), plus a
# per-kernel sweep of the intra knobs. Carried: .dev/bin/k3k.
set -uo pipefail
T0=$(date +%s)
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"; W=/tmp/prof; rm -rf $W; mkdir -p $W/bench $W/sweep
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
export K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
BIN=.dev/bin/k3k; NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
L=$OUT/log.txt; log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
P1="B1 T8192 H96 K128 safe lbsigab l2 bsig h0"; P0="B1 T8192 H96 K128 safe"; P5="varlen 8x1024 H96 K128 safe lbsigab l2 bsig h0"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv >> $L
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
K3K_BENCH_STEPS=1 timeout 120 $BIN bench --op kda --preset "$P1" --window-ms 60 --out $W/sweep \
  --knobs "TSPLIT=0;W1=4;W1=16;ARENA=1;ARENA=0;OPDT=bf16;EX2=exact" > $W/sweep.txt 2>&1
K3K_BENCH_STEPS=1 timeout 60 $BIN bench --op kda --preset "$P0;$P5" --window-ms 60 --out $W/sweep2 >> $W/sweep.txt 2>&1
log "sweep rc=$?"; cp $W/sweep.txt $OUT/sweep.txt
tar czf $OUT/reps.tgz -C $W intra.ncu-rep ncu-intra.txt 2>/dev/null
ls -la $OUT >> $L
grep -E "^\s+step|ms rel|^  [A-Z]" $OUT/sweep.txt | head -60
grep -E "Duration|Registers Per|Achieved Occ|Warp Cycles Per Issued|Issue Slots Busy|No Eligible" $OUT/intra-details.txt | head -20
