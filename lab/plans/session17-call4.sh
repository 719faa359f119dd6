#!/usr/bin/env bash
# Session 17, device call 4: mxfp4_matmul at HEAD (packed layout v2 and the new automatic gemv knobs: grouped decode
# with many tiles on 32-row CTAs of 4 warps with 3-stage cp.async rings of 256-column batches at 5 CTAs per SM;
# dense M16 on the 3-stage ring at 4 CTAs per SM): GPU check of the defaults, `k3k tune --preset k3` from the
# committed (now stale) records, the bench of every preset with the tuned records and cuBLAS in the same call,
# then a GPU fuzz. At most 8 files come back: log, check, tune, results, bench (2), peers, fuzz.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=540 bash lab/plans/session17-call4.sh  (carry [".carry"], timeout_s 570)
W=/tmp/w17d; source lab/plans/lib.sh
timeout 90 $K check --backend cuda --op mxfp4_matmul --cases 24 > $OUT/check.txt 2>&1; echo "check mxfp4 rc=$? $(date -u +%T)" >> $L
timeout 60 $K check --backend cuda --op mxfp4_matmul --dims "G=9,per=4,N=6144,K=1024,packed=1" --cases 2 >> $OUT/check.txt 2>&1
echo "check mxfp4 many-tile auto rc=$? $(date -u +%T)" >> $L
timeout 60 $K check --backend cuda --op mxfp4_matmul --dims "G=9,per=4,N=6144,K=1024,packed=1,epilogue=1,p=1" --cases 2 >> $OUT/check.txt 2>&1
echo "check mxfp4 many-tile auto GLU rc=$? $(date -u +%T)" >> $L
grep -iE "fail|error|mismatch" $OUT/check.txt | grep -v " 0 fail" | head -5 >> $L
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
timeout 170 $K tune --op mxfp4_matmul --preset k3 --budget 150s --max-candidates 14 --results $W/results > $OUT/tune.txt 2>&1
echo "tune rc=$? $(date -u +%T)" >> $L; pack
op mxfp4_matmul 100 70
[ "$(left)" -gt 45 ] && { timeout $(( $(left) - 10 )) $K fuzz --backend cuda --op mxfp4_matmul --time $(( $(left) - 25 ))s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L; tail -2 $OUT/fuzz.txt >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "^mxfp4|tuned vs default" $OUT/tune.txt | cut -c1-175
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-8
