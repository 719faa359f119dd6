#!/usr/bin/env bash
# Session 15, device call 5: why the persistent MLA prefill (PERSIST=true) is slower (call 4: 8% at T8192 H96, 12% at
# T32768 H12, same run): ncu (clocks left alone) of the default and of PERSIST=true at T32768 H12, launch statistics,
# speed of light, warp states and the scheduler.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=200 bash lab/plans/session15-call5.sh  (carry [".carry"], timeout_s 220)
W=/tmp/w15e; source lab/plans/lib.sh
mkdir -p $W/prof
SEC="--section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats --section SchedulerStats"
prof() { # name knobs
  [ "$(left)" -lt 45 ] && { echo "no time for ncu $1" >> $L; return; }
  timeout 60 ncu --clock-control none --kernel-name "regex:k3k_mla_prefill" --launch-count 1 $SEC $K bench --op gated_mla.prefill \
    --preset "causal T32768 H12" --knobs "$2" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb > $W/prof/$1.txt 2>&1
  echo "ncu $1 rc=$? $(date -u +%T)" >> $L
}
prof default "PINGPONG=true"
prof persist "PINGPONG=true,PERSIST=true"
tar czf $OUT/prof.tgz -C $W prof
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
for f in $W/prof/*.txt; do echo "== $f"; grep -E "Grid Size|Block Size|Waves Per SM|SM Frequency|Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|Achieved Occupancy|Registers Per" $f | head -24; done
