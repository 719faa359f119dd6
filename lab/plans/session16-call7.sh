#!/usr/bin/env bash
# Session 16, device call 7: the latent GEMM's new default (STORE=tma, bulk-store epilogue) checked, re-tuned from
# the committed records and published with torch._grouped_mm in the same call; mxfp4's dq_gemm path (which takes
# the GEMM's defaults) checked and its two prefill presets timed against cuBLAS / grouped_mm; GPU fuzz of both.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=560 bash lab/plans/session16-call7.sh  (carry [".carry"], timeout_s 590)
W=/tmp/w16g; source lab/plans/lib.sh
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
timeout 60 $K check --backend cuda --op latent_moe_gemm --cases 8 > $OUT/check.txt 2>&1; echo "check gemm rc=$? $(date -u +%T)" >> $L
timeout 60 $K check --backend cuda --op mxfp4_matmul --knobs PATH=dq_gemm --cases 4 >> $OUT/check.txt 2>&1; echo "check mxfp4 dq_gemm rc=$? $(date -u +%T)" >> $L
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -5 >> $L
timeout 130 $K tune --op latent_moe_gemm --preset k3 --budget 110s --max-candidates 6 --min-candidates 3 --results $W/results > $OUT/tune.txt 2>&1
echo "tune gemm rc=$? $(date -u +%T)" >> $L; pack
op latent_moe_gemm 90 70
op mxfp4_matmul 60 50 --preset "MXFP4 linear M4096 N6144 K3584;MXFP4 prefill 28 experts mean1024 N6144 K3584"
timeout 40 $K fuzz --backend cuda --op latent_moe_gemm --time 25s > $OUT/fuzz.txt 2>&1; echo "fuzz gemm rc=$? $(date -u +%T)" >> $L
tail -2 $OUT/fuzz.txt >> $L
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "^latent" $OUT/tune.txt | cut -c1-200
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-8
