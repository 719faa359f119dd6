#!/usr/bin/env bash
# Session 25 (or the next with a device), call 1 (issue 4), after session 24 (NOTES): L2PF=auto (128 on the staged
# gemv ring) and the tile-major automatic knobs (BN=64 BK=128 MINB=4) made the mxfp4 records of the 28 x 4 packed,
# GLU, M16, natural, tiles and MXFP8-activation presets stale (their default programs changed). In priority order,
# each step skipped when the budget runs short:
# 1. GPU checks of mxfp4_matmul at the new defaults (10 random cases; the tile-major 28 x 4 default, 3 cases);
# 2. ncu of the tile-major default's main kernel: DRAM and L2 throughput, L2 hit rate, warp stall reasons (what
#    bounds it now that the arithmetic is not the bound: session 24's NOMATH read 5% faster);
# 2b. tiles of 96 and 128 rows on the staged ring (allowed since session 24) against the default;
# 3. a re-tune of the two 28 x 4 presets, tile-major and packed (stale winners are timed first), then 4. the mxfp4
#    report rows with cuBLAS in the same call (the tuned records where present);
# 5. the same weight bytes at K 1792 / 3584 / 7168 with tile-major weights (grid >= 4 waves).
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=540 bash lab/plans/session25-call1.sh  (carry [".carry"], timeout_s 570)
W=/tmp/w25c1; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
timeout 100 $K check --backend cuda --op mxfp4_matmul --cases 10 > $OUT/check.txt 2>&1
echo "check rc=$? $(date -u +%T)" >> $L; tail -3 $OUT/check.txt >> $L
timeout 60 $K check --backend cuda --op mxfp4_matmul --dims "G=28,per=4,N=6144,K=3584,tiles=1" --cases 3 2>&1 | tail -1 >> $L
# 2. ncu (clocks left alone; one launch of the main kernel).
[ "$(left)" -gt 400 ] && { timeout 120 ncu --clock-control none --kernel-name "regex:mxfp4_mm" --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  $K bench --op mxfp4_matmul --preset "$P28 tiles" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb \
  > $OUT/ncu.txt 2>&1; echo "ncu rc=$? $(date -u +%T)" >> $L; }
# 2b. Wider tiles on the staged ring (BN up to 128 since session 24; fewer CTAs re-reading the activations).
mkdir -p $W/xp
[ "$(left)" -gt 330 ] && { timeout 75 $K bench --op mxfp4_matmul --preset "$P28 tiles" --results /nonexistent --out $W/xp/wide \
  --knobs "PATH=auto;BN=96,BK=128,MINB=3;BN=128,BK=128,MINB=3;BN=128,BK=128,WA=2,MINB=4;BN=128,BK=256,WA=2,MINB=3" \
  > $W/wide.log 2>&1; echo "wide rc=$? $(date -u +%T)" >> $L; grep -E "^ +$P28" $W/wide.log | cut -c1-200 >> $L; }
# 3. Re-tune the two 28 x 4 presets into $W/results (stale winners first; the GLU, M16 and MXFP8-activation records
# are stale too: a later call). `k3k tune --preset` takes one preset: one run each, the time left but step 4's split.
per=$(( ($(left) - 220) / 2 ))
if [ $per -gt 30 ]; then
  for p in "$P28 tiles" "$P28"; do
    timeout $(( per + 20 )) $K tune --op mxfp4_matmul --results $W/results --budget ${per}s --preset "$p" \
      > $W/tune.log 2>&1; echo "tune [$p] rc=$? $(date -u +%T)" >> $L; grep -E "^mxfp4_matmul " $W/tune.log | cut -c1-220 >> $L
  done
  pack
fi
# 4. The report rows with cuBLAS (records of $W/results where present, else the defaults).
op mxfp4_matmul 150 60 --preset "$P28;$P28 tiles;$P28 situ_glu+p;$P28 mxfp8-act;MXFP4 linear M16 N6144 K3584;MXFP4 linear M1 N6144 K3584"
# 5. The K sweep with tile-major weights.
[ "$(left)" -gt 60 ] && { timeout $(( $(left) - 10 )) $K bench --op mxfp4_matmul --results /nonexistent --out $W/b/shape \
  --dims "G=56,per=4,N=6144,K=1792,tiles=1;G=28,per=4,N=6144,K=3584,tiles=1;G=14,per=4,N=6144,K=7168,tiles=1" \
  > $W/shape.log 2>&1; echo "shapes rc=$? $(date -u +%T)" >> $L; grep -E "GB/s" $W/shape.log | cut -c1-150 >> $L; }
pack; echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "ms rel|GB/s" $OUT/bench.txt | cut -c1-170 | tail -12
grep -iE "DRAM Throughput|L2 Hit|L1/TEX Hit|Memory Throughput|Duration|Achieved Occupancy|Stall|Warp Cycles" $OUT/ncu.txt | head -24
