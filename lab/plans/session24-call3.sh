#!/usr/bin/env bash
# Session 24, device call 3 (issue 4), after call 2 (H200: L2PF=128 0.1083 vs 0.1161 packed, tiles 0.1070; the
# tiles tune's winner BN=64 BK=128 L2PF=128 MINB=4 0.1043). The report rows with that winner's knobs on every
# 28 x 4 preset, cuBLAS in the same call. Run: BUDGET_S=150 bash lab/plans/session24-call3.sh (timeout_s 170)
W=/tmp/w24c3; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
op mxfp4_matmul 110 30 --preset "$P28;$P28 tiles;$P28 mxfp8-act" \
  --knobs "L2PF=128;BN=64,BK=128,L2PF=128,MINB=4;BN=64,BK=128,L2PF=128,MINB=5"
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
grep -E "ms rel" $OUT/bench.txt | cut -c1-200 | tail -12
