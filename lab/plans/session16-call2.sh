#!/usr/bin/env bash
# Session 16, device call 2: what the peer does that we do not, at G28 mean1024 K3584 N6144. ncu (clocks left alone)
# of torch._grouped_mm's kernel (its name tells tile, cluster and schedule: cooperative or ping-pong) next to ours at
# the defaults: launch statistics, speed of light, pipes, memory, warp states and instruction statistics.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=300 bash lab/plans/session16-call2.sh  (carry [".carry"], timeout_s 320)
W=/tmp/w16b; source lab/plans/lib.sh
mkdir -p $W/prof
PRE="G28 mean1024 K3584 N6144"
SEC="--section LaunchStats --section Occupancy --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section InstructionStats"
# Which kernels the peer launches (names, grids).
timeout 90 ncu --clock-control none --launch-count 6 --section LaunchStats python3 lab/plans/session16-gemm-peer.py "$PRE" 3 > $W/prof/peer-list.txt 2>&1
echo "ncu peer list rc=$? $(date -u +%T)" >> $L
grep -E '^  [a-zA-Z_].*\(|Grid Size|Block Size|Cluster Size|Registers Per|Shared Memory Config' $W/prof/peer-list.txt | head -40 >> $L
timeout 90 ncu --clock-control none --kernel-name "regex:(?i)(cutlass|gemm|sm90)" --launch-skip 2 --launch-count 1 $SEC \
  python3 lab/plans/session16-gemm-peer.py "$PRE" 4 > $W/prof/peer.txt 2>&1
echo "ncu peer rc=$? $(date -u +%T)" >> $L
timeout 90 ncu --clock-control none --kernel-name "regex:k3k_gemm" --launch-count 1 $SEC $K bench --op latent_moe_gemm \
  --preset "$PRE" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb > $W/prof/k3k.txt 2>&1
echo "ncu k3k rc=$? $(date -u +%T)" >> $L
cp $W/prof/peer.txt $OUT/ncu-peer.txt; cp $W/prof/k3k.txt $OUT/ncu-k3k.txt; cp $W/prof/peer-list.txt $OUT/ncu-peer-list.txt
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
for f in peer k3k; do echo "== $f"; grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Executed Ipc A|Issue Slots Busy|Registers Per|Cluster Size|Grid Size|Block Size|Dynamic Shared|Achieved Occupancy|Executed Instructions  " $W/prof/$f.txt | head -24; done
