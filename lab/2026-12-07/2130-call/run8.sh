#!/bin/bash
# Device call, carry [".dev/bin", ".dev/peers", ".dev/whl"]: .dev/bin/k3k = release build of main (kda defaults of
# 3ef79f2, MADDR=load).
# (1) ncu full set with source counters of the kda intra kernel at B4 T4096 H64 (FlashKDA options), then of the
#     state kernel: the stall reasons by line that issue 42's next step needs (either GPU).
# (2) On an H200: issue 42's report at the current defaults (scripts/gpu_kda_flashkda.sh SEED=1 OLD=1 NCU=0 SWEEP=0,
#     FLA rows while the box lasts). On an H100: the intra kernel's profile at B1 T8192 H96.
set -u
T0=$(date +%s); BUDGET=${BUDGET_S:-570}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o8}; mkdir -p $OUT; L=$OUT/log.txt; B=.dev/bin/k3k
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(date -u +%FT%TZ)"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
W=/tmp/prof; rm -rf $W; mkdir -p $W
S="K128 safe lbsigab gbf16 l2 bsig h0"
prof() { # tag preset kernel box
  local tag=$1 p=$2 k=$3 box=$4
  [ $(left) -lt $(( box + 20 )) ] && { log "$tag $k: skipped ($(left)s left)"; return; }
  $B emit --op kda --preset "$p" --emit cuda > $W/$tag-kernels.cu 2>&1
  K3K_NVRTC_LINEINFO=1 timeout $box $NCU --set full --import-source yes --clock-control none --kernel-name regex:k3k_kda_$k \
    --launch-count 1 -o $W/$tag-$k $B bench --op kda --preset "$p" --reps 1 --window-ms 0 --out $W/bench > $W/$tag-$k.log 2>&1
  log "$tag $k rc=$?"
  $NCU -i $W/$tag-$k.ncu-rep --page details > $W/$tag-$k-details.txt 2>&1
  $NCU -i $W/$tag-$k.ncu-rep --page source --csv --print-source cuda > $W/$tag-$k-source-cuda.csv 2>&1
  $NCU -i $W/$tag-$k.ncu-rep --page source --csv --print-source sass > $W/$tag-$k-source-sass.csv 2>&1
  $NCU -i $W/$tag-$k.ncu-rep --page raw --csv > $W/$tag-$k-raw.csv 2>&1
  grep -E "^  [a-z]|Duration|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Achieved Occupancy|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Block Limit" $W/$tag-$k-details.txt | head -24 >> $L
  tar czf $OUT/profile.tgz --exclude="*.ncu-rep" -C $W . 2>/dev/null
}
prof b4 "B4 T4096 H64 $S" intra 150
prof b4 "B4 T4096 H64 $S" state 100
if echo "$GPU" | grep -q H200 && [ $(left) -ge 200 ] && [ -d .dev/peers ]; then
  mkdir -p $OUT/rep; OUT=$OUT/rep SEED=1 NCU=0 SWEEP=0 OLD=1 FLA=${FLA:-1} BUDGET_S=$(( $(left) - 10 )) bash scripts/gpu_kda_flashkda.sh > /tmp/report-stdout.txt 2>&1
  log "report rc=$?"; cat $OUT/rep/summary.md 2>/dev/null | head -14
else
  prof h96 "B1 T8192 H96 $S" intra 120
fi
cat $L
