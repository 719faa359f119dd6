#!/usr/bin/env bash
# Session 15, device call 7: the checks at HEAD after the session's changes (the prelude gained the turn primitives,
# so `k3k check --backend cuda --op all`), and the GPU fuzz of the latent GEMM with a box long enough to precompile
# (session 14's 20 s box ended in the precompile, no verdict), then of the prefill at its defaults.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=300 bash lab/plans/session15-call7.sh  (carry [".carry"], timeout_s 320)
W=/tmp/w15g; source lab/plans/lib.sh
timeout 110 $K check --backend cuda --op all --cases 3 > $OUT/check.txt 2>&1; echo "check all rc=$? $(date -u +%T)" >> $L
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -8 >> $L
timeout 100 $K fuzz --backend cuda --op latent_moe_gemm --time 30s > $OUT/fuzz.txt 2>&1; echo "fuzz gemm rc=$? $(date -u +%T)" >> $L
timeout 40 $K fuzz --backend cuda --op gated_mla.prefill --time 10s >> $OUT/fuzz.txt 2>&1; echo "fuzz prefill rc=$? $(date -u +%T)" >> $L
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
grep -E "^(op |[a-z_.]+ +(cuda|cpu))" $OUT/check.txt | tail -25
grep -E "cases|mismatch" $OUT/fuzz.txt | tail -6
