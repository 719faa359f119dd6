#!/usr/bin/env bash
# Session 14, device call 5: mxfp4's dq_gemm prefill now runs its GEMM with the latent GEMM's new defaults (producer
# warpgroup, overlapped walk; call 3 had timed it without them: 2.2709 ms vs grouped_mm 1.9729). `k3k check --backend
# cuda` of that path, then the preset at the defaults (no thread-0 variant in this run), the peer in the same call.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=200 bash lab/plans/session14-call5.sh  (carry [".carry"], timeout_s 230)
W=/tmp/w14e; source lab/plans/lib.sh
timeout 60 $K check --backend cuda --op mxfp4_matmul --knobs "BK=0,BM=0,BN=0,STAGES=0,WA=0,WB=0,SPLIT=0,CPS=0,MMA=auto,PATH=dq_gemm" --cases 6 > $OUT/check.txt 2>&1
echo "check rc=$? $(date -u +%T)" >> $L
op mxfp4_matmul 90 60 --preset "MXFP4 prefill 28 experts mean1024 N6144 K3584"
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200; tail -4 $OUT/check.txt
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-7
