#!/usr/bin/env bash
# Session 16, device call 11: the tuner's worker now estimates a candidate's time from a warm run (not the first,
# which loads the modules), so every candidate is timed over a comparable window; the latent GEMM re-tuned at HEAD
# (its IR changed with the guarded group search, so its records are keyed anew) from the committed records.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=200 bash lab/plans/session16-call11.sh  (carry [".carry"], timeout_s 220)
W=/tmp/w16k; source lab/plans/lib.sh
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
timeout 150 $K tune --op latent_moe_gemm --preset k3 --budget 120s --max-candidates 6 --min-candidates 3 --results $W/results > $OUT/tune.txt 2>&1
echo "tune gemm rc=$? $(date -u +%T)" >> $L
tar czf $OUT/results.tgz -C $W results
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "^latent|tuned vs" $OUT/tune.txt | cut -c1-200
