#!/bin/bash
# Device call (<= 580 s), carry [".dev"].
# H200: the KDA report with FlashKDA and FLA (pinned to Triton) in one run, at the tip (issue 42's report; FLA wheels
#   in .dev/whl).
# H100: issue 45's small-M rows: ncu of the MXFP8-activation kernels at M8, M64, M128; `k3k tune` of the six M-sweep
#   presets (30 s each) into a copy of results/; then `k3k bench` of the sweep (+ M4096) with those records, cuBLAS
#   bf16 and torch._scaled_mm in the same run, into a copy of the committed reports.
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o1300}; mkdir -p $OUT; L=$OUT/log.txt; B=.dev/bin/k3k
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(git rev-parse --short HEAD 2>/dev/null)"
if echo "$GPU" | grep -q H200; then
  OK=/tmp/o-kda; rm -rf $OK; mkdir -p $OK
  OUT=$OK SEED=1 NCU=0 SWEEP=0 OLD=1 BUDGET_S=555 bash scripts/gpu_kda_flashkda.sh > $OK/stdout.txt 2>&1
  log "kda report rc=$?"; tar czf $OUT/kda.tgz -C $OK . ; cp $OK/summary.md $OUT/kda-summary.md 2>/dev/null
  cat $L; head -30 $OUT/kda-summary.md; exit 0
fi
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for m in 8 64 128; do
  timeout 40 $NCU --clock-control none --kernel-name regex:k3k --launch-count 3 --section SpeedOfLight \
    --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis $B bench --op mxfp4_matmul --preset "MXFP4 linear M$m N6144 K3584 mxfp8-act" \
    --reps 1 --window-ms 0 --out /tmp/ncu-mx > $OUT/ncu-mx-m$m.txt 2>&1
  log "ncu M$m rc=$?"
done
R=/tmp/res; rm -rf $R; cp -r results $R; rm -rf $R/bench
for m in 8 16 32 64 128 256; do
  timeout 60 $B tune --op mxfp4_matmul --preset "MXFP4 linear M$m N6144 K3584 mxfp8-act" --budget 30s --results $R \
    > $OUT/tune-m$m.txt 2>&1; log "tune M$m rc=$?"
done
tar czf $OUT/results.tgz -C $R . 2>/dev/null
W=/tmp/mx-rep; rm -rf $W; mkdir -p $W; cp -r results/bench/. $W/; rm -rf $W/cpu
P=""; for m in 8 16 32 64 128 256 4096; do P="$P${P:+;}MXFP4 linear M$m N6144 K3584 mxfp8-act"; done
timeout 120 $B bench --op mxfp4_matmul --window-ms 100 --preset "$P" --results $R --out $W > $OUT/mx-bench.txt 2>&1
log "mx bench rc=$?"
SLUG=$(cd $W && ls -td */ | head -1 | tr -d /)
timeout 120 python3 scripts/peers.py $W/$SLUG --ops mxfp4_matmul --out $W/peers-mx.json > $OUT/mx-peers.txt 2>&1
log "mx peers rc=$?"
$B bench --merge-peers $W/peers-mx.json --out $W >> $OUT/mx-peers.txt 2>&1; log "merge rc=$?"
tar czf $OUT/mx.tgz -C $W $SLUG/mxfp4_matmul.json $SLUG/mxfp4_matmul.md peers-mx.json 2>/dev/null
cat $L
grep -E "linear M[0-9]+ .*mxfp8" $W/$SLUG/mxfp4_matmul.md | grep -v kept | cut -d'|' -f2-8
for m in 8 16 32 64 128 256; do tail -4 $OUT/tune-m$m.txt; done
for m in 8 64 128; do grep -E "^  k3k|Duration|DRAM Throughput|Registers Per|Grid Size|Achieved Occupancy|Issue Slots Busy|No Eligible" $OUT/ncu-mx-m$m.txt 2>/dev/null | head -24; done
