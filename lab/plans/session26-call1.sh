#!/usr/bin/env bash
# Session 26 (or the next with an H200), call 1 (issue 4): session 25 built a smaller staged ring (four tile-major
# 28 x 4 CTAs per SM) and XA=2 (activations loaded two quads ahead; now automatic on the 8-token staged rings), and
# timed them on H100s only (the H200 never came): XA=2 took 2-8% off every 28 x 4 preset, and 32-row CTAs of
# 128-column batches at MINB=6 a further 1-5% (tile-major, SiTU-GLU + p). None of it has run on the H200, which
# the automatic shapes were measured on (session 24: BN=64 BK=128 MINB=4 for tile-major weights, 0.1041 ms). In
# priority order:
# 1. GPU checks at the new defaults (10 random cases; the tile-major and GLU 28 x 4 defaults);
# 2. one bench run of the 28 x 4 presets at the defaults (XA=2), XA=1 and the H100's shapes (every set checked; the
#    report keeps the fastest that passes, every set's time in the JSON), then cuBLAS in the same call;
# 3. ncu of the tile-major default (did the activations' long-scoreboard stalls go, what bounds it now);
# 4. a re-tune of the tile-major preset (its records are stale since session 24).
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=540 bash lab/plans/session26-call1.sh  (carry [".carry"], timeout_s 570, kind nvidia-h200)
W=/tmp/w26c1; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
timeout 80 $K check --backend cuda --op mxfp4_matmul --cases 10 > $OUT/check.txt 2>&1
echo "check rc=$? $(date -u +%T)" >> $L; tail -1 $OUT/check.txt >> $L
for d in "G=28,per=4,N=6144,K=3584,tiles=1" "G=28,per=4,N=6144,K=3584,packed=1,epilogue=1,p=1"; do
  timeout 40 $K check --backend cuda --op mxfp4_matmul --dims "$d" --cases 2 2>&1 | tail -1 | sed "s/^/[$d] /" >> $L
done
op mxfp4_matmul 260 60 --preset "$P28 tiles;$P28;$P28 situ_glu+p;$P28 mxfp8-act" \
  --knobs "PATH=auto;XA=1;BN=32,BK=128,MINB=6;BN=64,BK=128,MINB=4"
[ "$(left)" -gt 150 ] && { timeout 100 ncu --clock-control none --kernel-name "regex:mxfp4_mm" --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  $K bench --op mxfp4_matmul --preset "$P28 tiles" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb \
  > $OUT/ncu.txt 2>&1; echo "ncu rc=$? $(date -u +%T)" >> $L; }
t=$(( $(left) - 20 ))
[ $t -gt 60 ] && { timeout $(( t + 10 )) $K tune --op mxfp4_matmul --preset "$P28 tiles" --budget ${t}s --results $W/results \
  > $W/tune.log 2>&1; echo "tune rc=$? $(date -u +%T)" >> $L; grep -E "^mxfp4_matmul " $W/tune.log | cut -c1-220 >> $L; pack; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "ms rel|GB/s" $OUT/bench.txt | cut -c1-200 | tail -20
grep -iE "DRAM Throughput|L2 Hit|Duration|Achieved Occupancy|Block Limit|Theoretical Occ|Warp Cycles Per Issued" $OUT/ncu.txt | head -14
