#!/bin/bash
# Device call, carry [".dev/bin", ".dev/peers", ".dev/whl"]: .dev/bin/k3k = release build of main.
# On an H200: (1) issue 42's KDA report at the current defaults (scripts/gpu_kda_flashkda.sh SEED=1 OLD=1 NCU=0
#   SWEEP=0 FLA=0) -> kda.tgz; (2) issue 45's M sweep report (M 8..256 and M4096, MXFP8 activations, H200 tune
#   records of results/, cuBLAS bf16 and torch._scaled_mm in the same run) -> mx.tgz; (3) the kda intra profile.
# On an H100: ncu full set with source counters of the kda intra and state kernels at B4 T4096 H64 (FlashKDA
#   options) and of the intra kernel at B1 T8192 H96 -> profile.tgz.
set -u
T0=$(date +%s); BUDGET=${BUDGET_S:-575}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o9}; mkdir -p $OUT; L=$OUT/log.txt; B=.dev/bin/k3k
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(date -u +%FT%TZ)"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
W=/tmp/prof; rm -rf $W; mkdir -p $W
S="K128 safe lbsigab gbf16 l2 bsig h0"
prof() { # tag preset kernel box
  local tag=$1 p=$2 k=$3 box=$4
  [ $(left) -lt $(( box + 15 )) ] && { log "$tag $k: skipped ($(left)s left)"; return; }
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
if echo "$GPU" | grep -q H200; then
  K=/tmp/kdarep; rm -rf $K; mkdir -p $K
  OUT=$K SEED=1 NCU=0 SWEEP=0 OLD=1 FLA=0 BUDGET_S=250 bash scripts/gpu_kda_flashkda.sh > $K/stdout.txt 2>&1
  log "kda report rc=$?"; cat $K/summary.md 2>/dev/null | head -12
  tar czf $OUT/kda.tgz -C $K . 2>/dev/null
  M=/tmp/mx-rep; rm -rf $M; mkdir -p $M; cp -r results/bench/. $M/; rm -rf $M/cpu
  P=""; for m in 8 16 32 64 128 256 4096; do P="$P${P:+;}MXFP4 linear M$m N6144 K3584 mxfp8-act"; done
  timeout $(( $(left) > 130 ? 110 : $(left) - 20 )) $B bench --op mxfp4_matmul --window-ms 100 --preset "$P" --out $M > $M/mx-bench.txt 2>&1
  log "mx bench rc=$?"
  SLUG=$(cd $M && ls -td */ | head -1 | tr -d /)
  timeout $(( $(left) > 110 ? 90 : $(left) - 15 )) python3 scripts/peers.py $M/$SLUG --ops mxfp4_matmul --out $M/peers-mx.json > $M/mx-peers.txt 2>&1
  log "mx peers rc=$?"
  $B bench --merge-peers $M/peers-mx.json --out $M >> $M/mx-peers.txt 2>&1; log "merge rc=$?"
  tar czf $OUT/mx.tgz -C $M $SLUG/mxfp4_matmul.json $SLUG/mxfp4_matmul.md peers-mx.json mx-bench.txt mx-peers.txt 2>/dev/null
  grep -E "linear M[0-9]+ .*mxfp8" $M/$SLUG/mxfp4_matmul.md | grep -v kept | cut -d'|' -f2-8 | tee -a $L
  prof b4 "B4 T4096 H64 $S" intra 100
else
  prof b4 "B4 T4096 H64 $S" intra 150
  prof b4 "B4 T4096 H64 $S" state 100
  prof h96 "B1 T8192 H96 $S" intra 120
fi
cat $L
