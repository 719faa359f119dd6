#!/bin/bash
# Device call (<= 580 s), carry [".dev"]: the KDA report with FlashKDA and FLA (pinned to Triton) in one run, at
# the tip (issue 42's report; FLA wheels in .dev/whl). On an H100 first: ncu of the MXFP8-activation small-M kernels
# (M8, M64, M128; issue 45's "what bounds M 32-256").
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o1300}; mkdir -p $OUT; L=$OUT/log.txt; B=.dev/bin/k3k
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(git rev-parse --short HEAD 2>/dev/null)"
if ! echo "$GPU" | grep -q H200; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for m in 8 64 128; do
    timeout 40 $NCU --clock-control none --kernel-name regex:k3k --launch-count 3 --section SpeedOfLight \
      --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats \
      --section MemoryWorkloadAnalysis $B bench --op mxfp4_matmul --preset "MXFP4 linear M$m N6144 K3584 mxfp8-act" \
      --reps 1 --window-ms 0 --out /tmp/ncu-mx > $OUT/ncu-mx-m$m.txt 2>&1
    log "ncu M$m rc=$?"
  done
fi
LEFT=$(( 570 - ($(date +%s) - T0) ))
OK=/tmp/o-kda; rm -rf $OK; mkdir -p $OK
OUT=$OK SEED=1 NCU=0 SWEEP=0 OLD=1 BUDGET_S=$(( LEFT - 15 )) bash scripts/gpu_kda_flashkda.sh > $OK/stdout.txt 2>&1
log "kda report rc=$?"; tar czf $OUT/kda.tgz -C $OK . ; cp $OK/summary.md $OUT/kda-summary.md 2>/dev/null
cat $L; cat $OUT/kda-summary.md 2>/dev/null | head -30
for m in 8 64 128; do grep -E "^  k3k|Duration|Memory Throughput|DRAM Throughput|Registers Per|Grid Size|Achieved Occupancy|Issue Slots Busy|No Eligible" $OUT/ncu-mx-m$m.txt 2>/dev/null | head -30; done
