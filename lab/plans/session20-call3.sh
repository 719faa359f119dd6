#!/usr/bin/env bash
# Superseded by session21-call2.sh (the same checks on session 21's binary, plus an ncu profile of the decode).
# Session 20 call 3: the final binary of this session on the GPU. The session restructured the prefill, decode, GEMM
# and MXFP4 builders and moved three operators into folders (every kernel's IR and CUDA hashes unchanged, so this
# is insurance, not a requirement) and changed the decode's automatic knobs (calls 1-2). `k3k check --backend cuda
# --op all`, the GPU primitive tests and a GPU fuzz of every operator.
# Build first: cargo build --release; strip -o .carry/k3k target/release/k3k; the gpu_primitives test binary (stripped)
# Run: BUDGET_S=300 bash lab/plans/session20-call3.sh  (carry [".carry"], timeout_s 330)
W=/tmp/w20c3; source lab/plans/lib.sh
timeout 120 $K check --backend cuda --op all --cases 4 > $OUT/check.txt 2>&1; echo "check all rc=$? $(date -u +%T)" >> $L
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -8 >> $L
K3K_GPU=1 timeout 60 .carry/gpu_primitives > $OUT/gpu_primitives.txt 2>&1; echo "gpu_primitives rc=$? $(grep 'test result' $OUT/gpu_primitives.txt) $(date -u +%T)" >> $L
[ "$(left)" -gt 40 ] && { timeout $(( $(left) - 10 )) $K fuzz --backend cuda --op all --time $(( ($(left) - 40) / 11 ))s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
grep -E "^(op |[a-z_.]+ +(cuda|cpu))" $OUT/check.txt | tail -14
grep -E "^(op |[a-z_.]+ +cuda )" $OUT/fuzz.txt | tail -14
