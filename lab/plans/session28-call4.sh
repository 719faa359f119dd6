#!/usr/bin/env bash
# RAN as session 28's call 5 (an H100; lab/2026-12-05/1933-h100-run/), with the MPS start and
# stop inline (now lib.sh's mps_start and mps_stop, the same commands). The SM clock samples
# did not work: nvidia-smi read 1980 MHz whenever the GPU was busy and never over 250 W (its power is a 1 s average).
# Session 28, call 4 (issue 4). On an H200: session28-call3.sh (the H200 plan and its SM-limit sweep). On an H100:
# call 2's SM-limit sweep (MPS) at 100 / 70 / 60 / 55 / 50% with the SM clock and power sampled by nvidia-smi every
# 20 ms during each bench, because fewer busy SMs draw less power and may clock higher, which would flatter their
# per-SM rate (the H100 ran the decode at 1.77 GHz at 132 SMs in call 1's ncu, 1.96 GHz without the math).
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=500 bash lab/plans/session28-call4.sh  (carry [".carry"], timeout_s 540, kind nvidia-h200)
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  exec bash lab/plans/session28-call3.sh
fi
W=/tmp/w28c4; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
S32="BN=32,BK=128,MINB=6"
mps_start
# clocks TAG CMD...: run CMD with nvidia-smi sampling the SM clock and power every 20 ms; log the median SM clock
# of the samples drawing over 250 W (the GPU busy) and how many there were.
clocks() { local tag=$1; shift
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 20 > $W/clk-$tag.csv 2>/dev/null &
  local smi=$!; "$@"; local rc=$?; kill $smi 2>/dev/null; wait $smi 2>/dev/null
  python3 -c "
import statistics, sys
r = [l.split(',') for l in open('$W/clk-$tag.csv') if l.count(',') == 1]
b = [float(c) for c, p in r if float(p) > 250]
print('  clocks $tag: %d of %d samples over 250 W, median SM %s MHz' % (len(b), len(r), statistics.median(b) if b else '-'))
" >> $L 2>&1; cat $W/clk-$tag.csv >> $OUT/clocks.csv; return $rc; }
for pct in 100 70 60 55 50; do [ "$(left)" -gt 40 ] || break
  export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct; echo "== SM limit $pct%" >> $L
  clocks read$pct timeout 60 python3 lab/plans/session28-read-328.py >> $L 2>&1 || echo "read rc=$?" >> $L
  for kn in PATH=auto $S32; do
    clocks b$pct-${kn%%,*} timeout 60 $K bench --op mxfp4_matmul --preset "$P28 tiles" --knobs "$kn" \
      --results /nonexistent --out $W/b/mps$pct > $W/mps.txt 2>&1; echo "  bench rc=$? $(date -u +%T)" >> $L
    grep -E "^  .*ms rel" $W/mps.txt | cut -c1-120 >> $L; cat $W/mps.txt >> $OUT/bench.txt
  done
done
mps_stop
pack; echo "end $(date -u +%T)" >> $L; cat $L
