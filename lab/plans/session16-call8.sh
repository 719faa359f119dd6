#!/usr/bin/env bash
# Session 16, device call 8: where the latent GEMM's warps wait at G28 mean1024 K3584 N6144 (the one preset still
# below torch._grouped_mm): ncu (clocks left alone) with PC-sampling stall counters per SASS instruction at the new
# defaults (bulk-store epilogue), and the peer's warp-state statistics for comparison. No timing claims.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=200 bash lab/plans/session16-call8.sh  (carry [".carry"], timeout_s 220)
W=/tmp/w16h; source lab/plans/lib.sh
mkdir -p $W/prof
PRE="G28 mean1024 K3584 N6144"
SEC="--section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats --section ComputeWorkloadAnalysis"
timeout 100 ncu --clock-control none --kernel-name "regex:k3k_gemm" --launch-count 1 $SEC -o $W/prof/k3k \
  $K bench --op latent_moe_gemm --preset "$PRE" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb > $W/prof/k3k.log 2>&1
echo "ncu k3k rc=$? $(date -u +%T)" >> $L
ncu -i $W/prof/k3k.ncu-rep --page details > $W/prof/k3k.txt 2>&1
ncu -i $W/prof/k3k.ncu-rep --page source --csv --print-source sass > $W/prof/k3k.sass.csv 2>&1
echo "  export rc=$? $(wc -c < $W/prof/k3k.sass.csv) bytes" >> $L
timeout 60 ncu --clock-control none --kernel-name "regex:device_kernel" --launch-skip 1 --launch-count 1 \
  --section WarpStateStats --section SpeedOfLight --section ComputeWorkloadAnalysis python3 lab/plans/session16-gemm-peer.py "$PRE" 3 > $W/prof/peer.txt 2>&1
echo "ncu peer rc=$? $(date -u +%T)" >> $L
tar czf $OUT/prof.tgz --exclude='*.ncu-rep' -C $W prof
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
for f in k3k peer; do echo "== $f"; grep -E "Duration|SM Frequency|Compute \(SM\)|Issue Slots Busy|Warp Cycles Per Issued|Stall" $W/prof/$f.txt | cut -c1-120 | head -14; done
