#!/usr/bin/env bash
# RAN as session 28's call 8, on an H100 (lab/2026-12-05/1941-h100-run/).
# Session 28, call 8 (issue 4): fixed costs or a slower steady state? The tile-major decode is 1.085x the read floor
# on the H100 whatever the SM count down to 92 (calls 2 and 5), and ncu shows it keeps DRAM busy 83% of the time
# against the read's 91% (call 7). Timing both at 14 / 28 / 56 / 112 experts (lib.sh size_sweep) separates a fixed
# cost per launch (ramp, tail: the same microseconds at every size) from a lower steady rate (the same ratio at every
# size). On the H200 (session 24: 0.1041 ms, 19 us over the floor against the H100's ~10) the same sweep is in
# session28-call3.sh.
# On an H200: session28-call3.sh (the H200 plan) instead.
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=300 bash lab/plans/session28-call8.sh  (carry [".carry"], timeout_s 330, kind nvidia-h200)
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  exec bash lab/plans/session28-call3.sh
fi
W=/tmp/w28c8; source lab/plans/lib.sh
size_sweep
pack; echo "end $(date -u +%T)" >> $L; cat $L
