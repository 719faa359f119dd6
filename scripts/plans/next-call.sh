#!/usr/bin/env bash
# Ready for the next session's first device call (written at the end of session 16, which had no device time left):
# the latent GEMM kernels with an odd number of 64-column bulk-store slices per tile (BN=64, BN=192, SiTU-GLU at
# BN=128), whose staging buffers now alternate by a running count, checked on the GPU (`k3k check --backend cuda`,
# pinned to a SPEC shape and random cases) and fuzzed; then the GEMM defaults fuzzed once more. Rename it to the
# session's call name when it runs, and commit its output under results/bench/nvidia-h200/.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=300 bash scripts/plans/next-call.sh  (carry [".carry"], timeout_s 320)
W=/tmp/wnext; source scripts/plans/lib.sh
for kn in "STORE=tma,BN=64" "STORE=tma,BN=192" "STORE=tma,BN=128"; do
  timeout 60 $K check --backend cuda --op latent_moe_gemm --knobs "$kn" --cases 8 >> $OUT/check.txt 2>&1
  echo "check gemm $kn rc=$? $(date -u +%T)" >> $L
done
timeout 60 $K check --backend cuda --op latent_moe_gemm --dims "G=28,mean=256,K=3584,N=6144,epilogue=1,p=1" \
  --knobs "STORE=tma,BN=128" >> $OUT/check.txt 2>&1; echo "check gemm GLU BN=128 at the preset's dims rc=$? $(date -u +%T)" >> $L
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -5 >> $L
timeout 80 $K fuzz --backend cuda --op latent_moe_gemm --knobs "STORE=tma,BN=64" --time 60s > $OUT/fuzz-bn64.txt 2>&1
echo "fuzz gemm BN=64 rc=$? $(date -u +%T)" >> $L; tail -2 $OUT/fuzz-bn64.txt >> $L
timeout 80 $K fuzz --backend cuda --op latent_moe_gemm --time 60s > $OUT/fuzz.txt 2>&1
echo "fuzz gemm rc=$? $(date -u +%T)" >> $L; tail -2 $OUT/fuzz.txt >> $L
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
