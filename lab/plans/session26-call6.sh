#!/usr/bin/env bash
# NOT RUN: no device time was left to start a machine (refused).
# Session 26, call 6 (issue 4), the last ~250 s of device time: the core of call 4 only, in case an H200 comes.
# On an H100 it stops at once. 1. a GPU check of the tile-major 28 x 4 default; 2. the tile-major and packed 28 x 4
# presets at auto (XA=2), XA=1 and BN=32 BK=128 MINB=6, with cuBLAS in the same call; 3. NOMATH between baselines.
# Run: BUDGET_S=140 bash lab/plans/session26-call6.sh  (carry [".carry"], timeout_s 150, kind nvidia-h200)
W=/tmp/w26c6; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then echo "an H100: stop" >> $L; cat $L; exit 0; fi
timeout 30 $K check --backend cuda --op mxfp4_matmul --dims "G=28,per=4,N=6144,K=3584,tiles=1" --cases 1 > $OUT/check.txt 2>&1
echo "check rc=$? $(date -u +%T)" >> $L; tail -1 $OUT/check.txt >> $L
op mxfp4_matmul 80 20 --preset "$P28 tiles;$P28" --knobs "PATH=auto;XA=1;BN=32,BK=128,MINB=6"
grep -E "ms rel|GB/s" $OUT/bench.txt | cut -c1-150 >> $L
[ "$(left)" -gt 35 ] && { timeout 30 env K3K_EXPERIMENT=NOMATH $K bench --op mxfp4_matmul --preset "$P28 tiles" \
  --results /nonexistent --out $W/xp > $W/xp.log 2>&1; echo "NOMATH rc=$? $(date -u +%T)" >> $L
  grep -E "ms rel" $W/xp.log | cut -c1-150 >> $L; }
echo "end $(date -u +%T)" >> $L; cat $L | cut -c1-200
