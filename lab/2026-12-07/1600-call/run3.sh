#!/bin/bash
# Device call (<= 580 s), carry [".dev"] (.dev/bin/k3k = release build of this checkout; FlashKDA sources; FLA wheels).
# On an H200: issue 42's report at the current kda defaults (scripts/gpu_kda_flashkda.sh SEED=1 OLD=1 NCU=0 SWEEP=0).
# On an H100 (that GPU's report at these defaults exists, 2026-12-07 15:58 UTC): ncu's full set with source counters of
# the intra and state kernels at B4 T4096 H64 and B1 T8192 H96, the profile issue 42's note needs at the defaults.
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o1700}; mkdir -p $OUT; L=$OUT/log.txt; B=.dev/bin/k3k
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(git rev-parse --short HEAD 2>/dev/null)"
if echo "$GPU" | grep -q H200; then
  OUT=$OUT SEED=1 NCU=0 SWEEP=0 OLD=1 FLA=${FLA:-1} BUDGET_S=${BUDGET_S:-540} bash scripts/gpu_kda_flashkda.sh > $OUT/report-stdout.txt 2>&1
  log "report rc=$?"; cat $OUT/summary.md 2>/dev/null | head -12; exit 0
fi
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
W=/tmp/prof; rm -rf $W; mkdir -p $W
S="K128 safe lbsigab gbf16 l2 bsig h0"
PAIRS=("b4|B4 T4096 H64 $S"); [ "${ONLY_B4:-0}" = 1 ] || PAIRS+=("h96|B1 T8192 H96 $S")
for pair in "${PAIRS[@]}"; do
  tag=${pair%%|*}; p=${pair#*|}
  $B emit --op kda --preset "$p" --emit cuda > $W/$tag-kernels.cu 2>&1
  for k in intra state; do
    K3K_NVRTC_LINEINFO=1 timeout 110 $NCU --set full --import-source yes --clock-control none --kernel-name regex:k3k_kda_$k \
      --launch-count 1 -o $W/$tag-$k $B bench --op kda --preset "$p" --reps 1 --window-ms 0 --out $W/bench > $W/$tag-$k.log 2>&1
    log "$tag $k rc=$?"
    $NCU -i $W/$tag-$k.ncu-rep --page details > $W/$tag-$k-details.txt 2>&1
    $NCU -i $W/$tag-$k.ncu-rep --page source --csv --print-source cuda > $W/$tag-$k-source-cuda.csv 2>&1
    $NCU -i $W/$tag-$k.ncu-rep --page source --csv --print-source sass > $W/$tag-$k-source-sass.csv 2>&1
    grep -E "^  [a-z]|Duration|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Achieved Occupancy|DRAM Throughput|Memory Throughput|Compute \(SM\)" $W/$tag-$k-details.txt | head -14 >> $L
  done
done
tar czf $OUT/profile.tgz --exclude="*.ncu-rep" -C $W . 2>/dev/null
cat $L
