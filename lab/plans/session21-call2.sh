#!/usr/bin/env bash
# Session 21 call 2: the final binary of session 21 on the GPU (the same checks as session20-call3.sh: `k3k check
# --backend cuda --op all`, the GPU primitive tests, a GPU fuzz of every operator; the mxfp4 check now leaves out
# outputs whose products cancel below their f32 bound), plus an Nsight Compute profile of the decode's automatic
# knobs at H96 (sections: speed of light, memory workload, warp states) to see whether shared memory or the tensor
# pipe bounds the 2.83 us per tile (NOTES, session 21).
# Build first: cargo build --release; strip -o .carry/k3k target/release/k3k; the gpu_primitives test binary (stripped)
# Run: BUDGET_S=360 bash lab/plans/session21-call2.sh  (carry [".carry"], timeout_s 390)
W=/tmp/w21c2; source lab/plans/lib.sh
timeout 120 $K check --backend cuda --op all --cases 4 > $OUT/check.txt 2>&1; echo "check all rc=$? $(date -u +%T)" >> $L
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -8 >> $L
K3K_GPU=1 timeout 60 .carry/gpu_primitives > $OUT/gpu_primitives.txt 2>&1; echo "gpu_primitives rc=$? $(grep 'test result' $OUT/gpu_primitives.txt) $(date -u +%T)" >> $L
mkdir -p $W/prof
[ "$(left)" -gt 120 ] && { timeout 75 ncu --clock-control none --kernel-name "regex:k3k_mla_decode" --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section ComputeWorkloadAnalysis \
  $K bench --op gated_mla.decode --preset "b128 S4096 H96" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb > $W/prof/decode-h96.txt 2>&1
  echo "ncu rc=$? $(date -u +%T)" >> $L; tar czf $OUT/prof.tgz -C $W prof; }
[ "$(left)" -gt 40 ] && { timeout $(( $(left) - 10 )) $K fuzz --backend cuda --op all --time $(( ($(left) - 40) / 11 ))s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
grep -E "^(op |[a-z_.]+ +(cuda|cpu))" $OUT/check.txt | tail -14
grep -E "^(op |[a-z_.]+ +cuda )" $OUT/fuzz.txt | tail -14
grep -E "Duration|Throughput|Pipe|Shared|Issue Slots|Eligible|Stall" $W/prof/decode-h96.txt 2>/dev/null | head -30
