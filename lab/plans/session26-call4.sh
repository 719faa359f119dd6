#!/usr/bin/env bash
# Session 26, call 4 (issue 4): call 3's H200 path as it is (call 3 ran on an H100 and took its short path); on an
# H100 it now stops at once, keeping the budget. Call 3's H100 figures: L2 throughput barely follows the tile height
# (79.9 / 81.1 / 78.7% at BN=64 / 32 / 128), so hypothesis (b) below is weaker; the H200 may still differ.
# Session 26, call 3 (issue 4): session26-h200.sh (call 2, which ran on an H100) for the H200 again, plus the test of
# a second hypothesis. Call 2 on the H100: the tile-major decode is 1.07x the streaming-read floor of its bytes
# (0.1239 vs 0.1161 ms) and NOMATH saves only 2.5-4%, so on the H100 the decode is memory-bound and near done; the
# H200 (session 24: 1.23x its floor) is where the gap is. Two H200 hypotheses, both tested here:
# (a) issue rate: 0.12 instructions per byte need ~50% of peak issue at the target (NOMATH, step 5);
# (b) L2 throughput: on the H100, ncu puts L2 throughput at 80% of peak with DRAM at 83%. Each weight byte costs two
#     L2 operations (fill, read) and the activations' re-reads add 24% (BN=64) or 48% (BN=32) of the weight bytes,
#     all L2 hits; with 1.43x the DRAM bandwidth and the same L2, the H200 would need ~115% of that L2 peak, so
#     it would be L2-bound and gain from fewer activation re-reads (wider tiles: BN=96/128, now 2 CTAs per SM with
#     the smaller ring) and lose with BN=32 (as session 24 measured at XA=1). Step 3 times those shapes and step 6
#     profiles BN=64 and BN=32 (L2 throughput in SpeedOfLight).
# Steps: 1. checks; 2. the four 28 x 4 presets at auto / XA=1 / BN=32 BK=128 MINB=6 / BN=64 BK=128 MINB=4 with
# cuBLAS; 3. tile-major at BN=128 MINB=2 and BN=96 MINB=3 against auto and BN=32; 4. the read floor; 5. NOMATH
# between baselines; 6. ncu of auto and of BN=32 MINB=6; 7. a re-tune with what is left.
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=420 bash lab/plans/session26-call4.sh  (carry [".carry"], timeout_s 450, kind nvidia-h200)
W=/tmp/w26c4; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
S32="BN=32,BK=128,MINB=6"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  echo "an H100 again: nothing left to measure there this session (calls 1-3), the budget is kept" >> $L; cat $L; exit 0
fi
timeout 80 $K check --backend cuda --op mxfp4_matmul --cases 10 > $OUT/check.txt 2>&1
echo "check rc=$? $(date -u +%T)" >> $L; tail -1 $OUT/check.txt >> $L
for d in "G=28,per=4,N=6144,K=3584,tiles=1" "G=28,per=4,N=6144,K=3584,packed=1,epilogue=1,p=1"; do
  timeout 40 $K check --backend cuda --op mxfp4_matmul --dims "$d" --cases 2 2>&1 | tail -1 | sed "s/^/[$d] /" >> $L
done
op mxfp4_matmul 260 60 --preset "$P28 tiles;$P28;$P28 situ_glu+p;$P28 mxfp8-act" \
  --knobs "PATH=auto;XA=1;BN=32,BK=128,MINB=6;BN=64,BK=128,MINB=4"
mkdir -p $W/xp; : > $W/xp.txt
xp() { timeout 50 env ${1:+K3K_EXPERIMENT=$1} $K bench --op mxfp4_matmul --preset "$3" --results /nonexistent \
  --out $W/xp/${1:-base}-$2 ${4:+--knobs "$4"} > $W/xp.log 2>&1; echo "xp ${1:-base} $2 rc=$? $(date -u +%T)" >> $W/xp.txt
  grep -E "^ +$P28" $W/xp.log | cut -c1-170 >> $W/xp.txt; }
[ "$(left)" -gt 240 ] && { xp "" wide "$P28 tiles" "PATH=auto;$S32;BN=128,BK=128,MINB=2;BN=96,BK=128,MINB=3"; cat $W/xp.txt >> $L; : > $W/xp.txt; }
[ "$(left)" -gt 200 ] && { timeout 90 python3 lab/plans/session10-read-floor.py $OUT/read-floor.json > $W/read-floor.txt 2>&1
  echo "read floor rc=$? $(date -u +%T)" >> $L; tail -6 $W/read-floor.txt >> $L; }
[ "$(left)" -gt 170 ] && { xp "" b1 "$P28 tiles" "PATH=auto;$S32"; xp NOMATH 1 "$P28 tiles" "PATH=auto;$S32"
  xp "" b2 "$P28 tiles" "PATH=auto;$S32"; cat $W/xp.txt >> $L; }
for kn in PATH=auto $S32; do
  [ "$(left)" -gt 80 ] && { echo "== ncu $kn" >> $OUT/ncu.txt; timeout 60 ncu --clock-control none --kernel-name "regex:mxfp4_mm" \
    --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    --section SchedulerStats $K bench --op mxfp4_matmul --preset "$P28 tiles" --knobs "$kn" --reps 1 --window-ms 0 \
    --results /nonexistent --out $W/pb >> $OUT/ncu.txt 2>&1; echo "ncu $kn rc=$? $(date -u +%T)" >> $L; }
done
t=$(( $(left) - 20 ))
[ $t -gt 60 ] && { timeout $(( t + 10 )) $K tune --op mxfp4_matmul --preset "$P28 tiles" --budget ${t}s --max-candidates 64 \
  --results $W/results > $W/tune.log 2>&1; echo "tune rc=$? $(date -u +%T)" >> $L
  grep -E "^mxfp4_matmul " $W/tune.log | cut -c1-220 >> $L; pack; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "ms rel|GB/s" $OUT/bench.txt | cut -c1-200 | tail -20
grep -iE "^== ncu|DRAM Throughput|L2 Cache Throughput|Duration|L2 Hit Rate|Warp Cycles Per Issued|No Eligible" $OUT/ncu.txt | head -16
