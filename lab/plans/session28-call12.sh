#!/usr/bin/env bash
# NOT RUN: the device refused it in session 28 (too little budget left to start a machine).
# Session 28, call 12 (issue 4): call 11's two PM-sampling reports (results/bench/nvidia-h100-80gb-hbm3/
# session28-call11/reps.tgz) at full resolution: every sample of the DRAM read throughput, the CTAs launched, the SM
# cycles active, the instructions and the L2 throughput, from the first to the last sample with SMs active. No GPU
# work: ncu's Python report module is only on the device machine.
# Run: bash lab/plans/session28-call12.sh  (timeout_s 120; any kind)
OUT=${OUT:-./gpu-out}; mkdir -p $OUT /tmp/w28c12
tar xzf lab/2026-12-05/1949-h100-run/reps.tgz -C /tmp/w28c12
for r in read decode; do
  python3 lab/plans/session28-pm-dump.py /tmp/w28c12/$r.ncu-rep --full dramc__read_throughput gr__ctas_launched \
    sm__cycles_active sm__inst_executed_realtime.avg.pct lts__throughput > $OUT/pm-full-$r.txt 2>&1
  echo "$r rc=$? $(wc -l < $OUT/pm-full-$r.txt) lines"
done
head -5 $OUT/pm-full-decode.txt
