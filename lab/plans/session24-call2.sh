#!/usr/bin/env bash
# Session 24, device call 2 (issue 4), after call 1 (H100: tile-major and L2PF=128/256 both ~6.5% faster than the
# packed default, deeper rings and bulk copies slower, NOMATH only 5% faster). With the ~330 s left:
# 1. the report rows (packed, tiles, MXFP8 activations) at the default and L2PF=128, cuBLAS in the same call;
# 2. tile-major: STAGES=4, COPY=bulk, STAGES=4 with L2PF=128; 3. packed: STAGES=4 with L2PF=128, L2PF=256;
# 4. a short tune of the tile-major preset with what is left.
# Run: BUDGET_S=330 bash lab/plans/session24-call2.sh  (carry [".carry"], timeout_s 360)
W=/tmp/w24c2; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
op mxfp4_matmul 130 50 --preset "$P28;$P28 tiles;$P28 mxfp8-act" --knobs "PATH=auto;L2PF=128"
mkdir -p $W/xp; : > $OUT/xp.txt
xp() { timeout $1 $K bench --op mxfp4_matmul --preset "$3" --results /nonexistent --out $W/xp/$2 --knobs "$4" \
  > $W/xp.log 2>&1; echo "xp $2 rc=$? $(date -u +%T)" >> $OUT/xp.txt; grep -E "^ +$P28" $W/xp.log | cut -c1-200 >> $OUT/xp.txt; }
[ "$(left)" -gt 70 ] && xp 60 tiles "$P28 tiles" "STAGES=4;COPY=bulk;STAGES=4,L2PF=128"
[ "$(left)" -gt 50 ] && xp 45 packed "$P28" "STAGES=4,L2PF=128;L2PF=256"
t=$(( $(left) - 25 ))
[ $t -gt 50 ] && { timeout $(( t + 15 )) $K tune --op mxfp4_matmul --preset "$P28 tiles" --budget ${t}s --results $W/results \
  > $W/tune.log 2>&1; echo "tune rc=$? $(date -u +%T)" >> $L; tail -12 $W/tune.log >> $OUT/xp.txt; pack; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
grep -E "ms rel" $OUT/bench.txt | cut -c1-200 | tail -12
cat $OUT/xp.txt
