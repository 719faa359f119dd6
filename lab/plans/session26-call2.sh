#!/usr/bin/env bash
# NOT RUN: its steps were folded into session26-h200.sh, which ran as call 2 (the numbering of calls follows the runs).
# Session 26, device call 2 (issue 4), on the machine call 1 left warm (whichever card it is). Call 1 landed on an
# H100 again: the 32-row CTAs of 128-column batches (BN=32 BK=128 MINB=6) are the fastest tile-major 28 x 4 shape
# there in a second session (0.1261 vs 0.1284 auto), and ncu puts the default at 82.8% of DRAM peak. What bounds it
# on this card, and how much is left:
# 1. the streaming-read floor of session 10 (a Triton kernel that only reads the same bytes, timed like k3k bench),
#    so the decode's time is read against what reading its bytes alone costs on this card;
# 2. the timing experiment NOMATH (products, decode and scales removed; wrong values on purpose) between baselines,
#    at the automatic shape and at BN=32 BK=128 MINB=6: is the math on the critical path at XA=2?
# 3. the 32-row shape's neighbours: MINB 5-8, STAGES=4 (a 32-row stage is 2176 bytes per warp, so a fourth stage
#    costs little residency), XA=1, L2PF=256.
# Run: BUDGET_S=300 bash lab/plans/session26-call2.sh  (carry [".carry"], timeout_s 330)
W=/tmp/w26c2; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
timeout 90 python3 lab/plans/session10-read-floor.py $OUT/read-floor.json > $OUT/read-floor.txt 2>&1
echo "read floor rc=$? $(date -u +%T)" >> $L; tail -8 $OUT/read-floor.txt >> $L
mkdir -p $W/xp; : > $OUT/xp.txt
xp() { timeout 60 env ${1:+K3K_EXPERIMENT=$1} $K bench --op mxfp4_matmul --preset "$3" --results /nonexistent \
  --out $W/xp/${1:-base}-$2 ${4:+--knobs "$4"} > $W/xp.log 2>&1; echo "xp ${1:-base} $2 rc=$? $(date -u +%T)" >> $OUT/xp.txt
  grep -E "^ +$P28" $W/xp.log | cut -c1-170 >> $OUT/xp.txt; }
S32="BN=32,BK=128,MINB=6"
if [ "$(left)" -gt 120 ]; then
  xp "" b1 "$P28 tiles" "PATH=auto;$S32"; xp NOMATH 1 "$P28 tiles" "PATH=auto;$S32"; xp "" b2 "$P28 tiles" "PATH=auto;$S32"
fi
[ "$(left)" -gt 60 ] && xp "" s32 "$P28 tiles" \
  "PATH=auto;$S32;BN=32,BK=128,MINB=5;BN=32,BK=128,MINB=7;BN=32,BK=128,MINB=8;$S32,STAGES=4;$S32,XA=1;$S32,L2PF=256"
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
cat $OUT/xp.txt | cut -c1-200
