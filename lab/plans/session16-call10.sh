#!/usr/bin/env bash
# Session 16, device call 10: a second same-call measurement of the latent GEMM at HEAD (guarded group search,
# bulk-store epilogue) against torch._grouped_mm on the five presets (call 9 read mean256 at parity, 1.00x), and
# mxfp4's dq_gemm prefill presets, which run the same GEMM, against cuBLAS / grouped_mm.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=300 bash lab/plans/session16-call10.sh  (carry [".carry"], timeout_s 320)
W=/tmp/w16j; source lab/plans/lib.sh
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
op latent_moe_gemm 90 70
op mxfp4_matmul 60 50 --preset "MXFP4 linear M4096 N6144 K3584;MXFP4 prefill 28 experts mean1024 N6144 K3584"
rm -f $OUT/results.tgz
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-8
