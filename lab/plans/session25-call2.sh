#!/usr/bin/env bash
# Session 25, device call 2 (issue 4), after call 1 (H100: ncu of the tile-major 28 x 4 decode: DRAM 80% of peak,
# 3 CTAs per SM held by shared memory, not the MINB=4 the knobs ask for; 12 warps per SM, long-scoreboard stalls
# 43%; wider tiles slower). This binary shrinks PATH=gemv's staged ring: tile-major scales are copied whole (64
# bytes per 16-row block and quad instead of 256 bytes of per-lane words) and the warps' partials alias their own
# rings, so the tile-major default takes 57 KB and four CTAs fit an SM (and STAGES=4 three). In priority order:
# 1. GPU checks: 10 random cases; tile-major problems (per-lane at several BN / STAGES, GLU, MXFP8, bulk) and the
#    packed staged rings (the partials moved for every staged kernel);
# 2. the tiles preset at the new default against the shapes the smaller ring now admits and XA=2 (activations
#    loaded two quads ahead: call 1's long-scoreboard stalls), twice; the packed preset once;
# 3. ncu of the new default (occupancy, DRAM, stalls);
# 4. the report rows with cuBLAS in the same call (packed and tile-major 28 x 4).
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=450 bash lab/plans/session25-call2.sh  (carry [".carry"], timeout_s 480)
W=/tmp/w25c2; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
timeout 80 $K check --backend cuda --op mxfp4_matmul --cases 10 > $OUT/check.txt 2>&1
echo "check rc=$? $(date -u +%T)" >> $L; tail -1 $OUT/check.txt >> $L
for dk in "G=5,c0=4,c1=0,c2=8,c3=1,c4=3,K=512,N=64,tiles=1|PATH=auto" \
          "G=3,c0=8,c1=2,c2=5,K=1024,N=128,tiles=1,epilogue=1,p=1|STAGES=4,L2PF=256" \
          "G=4,per=7,K=384,N=96,tiles=1,act=1,wide=1|BN=16,STAGES=5" "M=6,K=640,N=160,tiles=1|BN=32,STAGES=4" \
          "G=3,c0=8,c1=2,c2=5,K=1024,N=256,tiles=1|BN=128,STAGES=3,MINB=2" \
          "G=5,c0=4,c1=0,c2=8,c3=1,c4=3,K=512,N=64,tiles=1|COPY=bulk" \
          "G=3,c0=8,c1=2,c2=5,K=1024,N=128,tiles=1,epilogue=1,p=1|COPY=bulk,STAGES=5" \
          "G=28,per=4,N=6144,K=3584,tiles=1|PATH=auto" "G=28,per=4,N=6144,K=3584,packed=1|PATH=auto" \
          "G=3,c0=8,c1=2,c2=5,K=1024,N=128,packed=1,epilogue=1,p=1|PATH=gemv,STAGES=4" \
          "M=16,N=512,K=1024,packed=1|PATH=auto" "G=28,per=4,N=6144,K=3584,tiles=1|XA=2" \
          "G=3,c0=8,c1=2,c2=5,K=1024,N=128,packed=1,epilogue=1,p=1|PATH=gemv,STAGES=3,XA=2" \
          "M=16,N=512,K=1024,packed=1|XA=2"; do
  timeout 40 $K check --backend cuda --op mxfp4_matmul --dims "${dk%|*}" --knobs "${dk#*|}" --cases 2 2>&1 | tail -1 \
    | sed "s/^/[${dk}] /" >> $OUT/check.txt
done
echo "dims checks $(date -u +%T)" >> $L; tail -14 $OUT/check.txt | cut -c1-200 >> $L
# 2. Shapes the smaller ring admits (each variant checked in the run), twice.
mkdir -p $W/xp
xp() { timeout 80 $K bench --op mxfp4_matmul --preset "$2" --results /nonexistent --out $W/xp/$1 --knobs "$3" \
  > $W/xp-$1.log 2>&1; echo "xp $1 rc=$? $(date -u +%T)" >> $L; grep -E "^ +$P28" $W/xp-$1.log | cut -c1-200 >> $OUT/xp.txt; }
TS="PATH=auto;XA=2;XA=2,MINB=3;MINB=3;STAGES=4,MINB=3;STAGES=4,MINB=3,XA=2;BN=32,BK=128,MINB=6;BN=32,BK=128,MINB=6,XA=2;WA=8,MINB=2"
[ "$(left)" -gt 250 ] && xp tiles1 "$P28 tiles" "$TS"
[ "$(left)" -gt 220 ] && xp packed1 "$P28" "PATH=auto;XA=2;XA=2,MINB=4;BN=128,BK=128,MINB=2"
[ "$(left)" -gt 200 ] && xp tiles2 "$P28 tiles" "$TS"
cat $OUT/xp.txt >> $L
# 3. ncu of the new default (clocks left alone; one launch of the main kernel).
[ "$(left)" -gt 170 ] && { timeout 100 ncu --clock-control none --kernel-name "regex:mxfp4_mm" --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  $K bench --op mxfp4_matmul --preset "$P28 tiles" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb \
  > $OUT/ncu.txt 2>&1; echo "ncu rc=$? $(date -u +%T)" >> $L; }
# 4. The report rows with cuBLAS in the same call.
op mxfp4_matmul 100 50 --preset "$P28;$P28 tiles"
pack; echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "ms rel|GB/s" $OUT/bench.txt | cut -c1-170 | tail -6
grep -iE "DRAM Throughput|L2 Hit|Duration|Achieved Occupancy|Block Limit|Theoretical Occ|Warp Cycles Per Issued" $OUT/ncu.txt | head -14
