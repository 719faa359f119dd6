#!/usr/bin/env bash
# Session 16, device call 3: call 2 again for the peer only, matching the CUTLASS kernel itself (call 2's regex caught
# torch's prepare_grouped_gemm_data): ncu (clocks left alone) of torch._grouped_mm at G28 mean1024 K3584 N6144.
# Run: BUDGET_S=120 bash lab/plans/session16-call3.sh  (carry [".carry"], timeout_s 140)
W=/tmp/w16c; source lab/plans/lib.sh
PRE="G28 mean1024 K3584 N6144"
SEC="--section LaunchStats --section Occupancy --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section InstructionStats"
timeout 100 ncu --clock-control none --kernel-name "regex:device_kernel|GemmUniversal|sm90" --launch-skip 1 --launch-count 1 $SEC \
  python3 lab/plans/session16-gemm-peer.py "$PRE" 3 > $OUT/ncu-peer.txt 2>&1
echo "ncu peer rc=$? $(date -u +%T)" >> $L
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "^  [a-zA-Z_]" $OUT/ncu-peer.txt | cut -c1-1500
grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Executed Ipc A|Issue Slots Busy|Registers Per|Cluster Size|Grid Size|Block Size|Dynamic Shared|Achieved Occupancy|Executed Instructions  " $OUT/ncu-peer.txt | head -24
