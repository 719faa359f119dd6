#!/usr/bin/env bash
# Session 21 call 3: `k3k tune --op all --preset k3` on this session's binary (issue 8: every operator's SPEC presets
# tuned within 10 minutes of wall time, at HEAD; tuned vs default per preset), starting from the committed records
# (stale ones seed round 1). Writes the tuned records and TUNE.md back (results.tgz).
# Build first: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=560 bash lab/plans/session21-call3.sh  (carry [".carry"], timeout_s 590)
W=/tmp/w21c3; source lab/plans/lib.sh
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
timeout $(( $(left) - 25 )) $K tune --op all --preset k3 --budget $(( $(left) - 60 ))s --results $W/results > $OUT/tune.txt 2>&1
echo "tune rc=$? $(date -u +%T)" >> $L; pack
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
grep -E "preset\(s\) in|tuned vs default|^Not tuned" $OUT/tune.txt | cut -c1-200
grep -E "^[a-z_.]+ +.*[0-9]x " $OUT/tune.txt | cut -c1-150
