#!/usr/bin/env bash
# Session 17, device call 5: where the 28 x 4 MXFP4 gemv's warps wait at the new defaults (BN=32 BK=256 STAGES=3
# MINB=5 WA=4, 0.1186 ms in call 4): ncu (clocks left alone) with PC-sampling stall counters per SASS instruction,
# warp states, memory. No timing claims.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=150 bash lab/plans/session17-call5.sh  (carry [".carry"], timeout_s 170)
W=/tmp/w17e; source lab/plans/lib.sh
mkdir -p $W/prof
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
SEC="--section SpeedOfLight --section WarpStateStats --section SourceCounters --section Occupancy --section MemoryWorkloadAnalysis --section SchedulerStats"
timeout 100 ncu --clock-control none --kernel-name "regex:mxfp4" --launch-count 1 $SEC -o $W/prof/g28 \
  $K bench --op mxfp4_matmul --preset "$P28" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb > $W/prof/g28.log 2>&1
echo "ncu rc=$? $(date -u +%T)" >> $L
ncu -i $W/prof/g28.ncu-rep --page details > $W/prof/g28.txt 2>&1
ncu -i $W/prof/g28.ncu-rep --page source --csv --print-source sass > $W/prof/g28.sass.csv 2>&1
echo "  export rc=$? $(wc -c < $W/prof/g28.sass.csv) bytes" >> $L
tar czf $OUT/prof.tgz --exclude='*.ncu-rep' -C $W prof
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "Duration|DRAM Throughput|Issued Warp|Eligible Warps|Active Warps Per|Achieved Occupancy|Stall" $W/prof/g28.txt | head -30
