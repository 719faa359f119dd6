#!/usr/bin/env bash
# RAN as session 27's calls 1, 3-5, 8 and 9, each on an H100 (stopped at once); the next H200 call runs it as it is.
# (After those calls its checks, tune and summary moved into lib.sh's checks_mxfp4, tune_rest and summary, unchanged.)
# Session 27, call 1 (issue 4): session26-call4.sh (the H200 plan that never met an H200 in session 26) with one step
# more: session27-read-pattern.py, the same 328 MB read in 16 / 56 / 112 KB per program and as a persistent grid,
# to see whether the decode's order of reads (a few hundred concurrent 112 KB streams) is what costs the H200 1.23x
# its read floor while the H100 pays 1.07-1.10x. Order of value: checks; the four 28 x 4 presets with cuBLAS (the
# report rows of the current kernels); the read floor and the read pattern; NOMATH between baselines; wide tiles; ncu
# of auto and BN=32; a re-tune with what is left. On an H100 it stops at once (sessions 25-26 measured it there).
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=420 bash lab/plans/session27-call1.sh  (carry [".carry"], timeout_s 450, kind nvidia-h200)
W=/tmp/w27c1; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
S32="BN=32,BK=128,MINB=6"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  echo "an H100: nothing left to measure there (sessions 25-26), the budget is kept" >> $L; cat $L; exit 0
fi
checks_mxfp4
op mxfp4_matmul 260 60 --preset "$P28 tiles;$P28;$P28 situ_glu+p;$P28 mxfp8-act" \
  --knobs "PATH=auto;XA=1;BN=32,BK=128,MINB=6;BN=64,BK=128,MINB=4"
[ "$(left)" -gt 220 ] && { timeout 90 python3 lab/plans/session10-read-floor.py $OUT/read-floor.json > $W/rf.txt 2>&1
  echo "read floor rc=$? $(date -u +%T)" >> $L; tail -6 $W/rf.txt >> $L
  timeout 60 python3 lab/plans/session27-read-pattern.py $OUT/read-pattern.json > $W/rp.txt 2>&1
  echo "read pattern rc=$? $(date -u +%T)" >> $L; tail -10 $W/rp.txt >> $L; }
[ "$(left)" -gt 170 ] && { xp "" b1 "$P28 tiles" "PATH=auto;$S32"; xp NOMATH 1 "$P28 tiles" "PATH=auto;$S32"
  xp "" b2 "$P28 tiles" "PATH=auto;$S32"; cat $W/xp.txt >> $L; : > $W/xp.txt; }
[ "$(left)" -gt 150 ] && { xp "" wide "$P28 tiles" "PATH=auto;$S32;BN=128,BK=128,MINB=2;BN=96,BK=128,MINB=3"; cat $W/xp.txt >> $L; }
for kn in PATH=auto $S32; do [ "$(left)" -gt 80 ] && ncu_mxfp4 "$P28 tiles" "$kn"; done
tune_rest "$P28 tiles"
summary
