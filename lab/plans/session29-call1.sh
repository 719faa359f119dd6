#!/usr/bin/env bash
# RAN in session 29 (the third try: the first two got no machine), on an H100 (lab/2026-12-05/2151-h100-run/).
# Written while no device was lent.
# Session 29, call 1 (issue 4): does a balanced persistent grid, or stream-K, remove the decode's tail?
# Session 28 call 11's PM samples, read at full resolution in session 29 without a device
# (lab/2026-12-05/2049-h100-run/), put ~9 us of lost DRAM time in the decode's last 10 us (83%,
# 49%, 29%, 18%, 10%, 3% of peak, one sample per 1.5 us) against ~1.5 us for the read: the hardware-scheduled
# grid's last CTAs (each a 64-row tile's 122 KB) drain on their own. Session 29 made `CPS` (a persistent grid) give
# PATH=gemv balanced tiles (28 x 4 at 64 rows: 448 CTAs of exactly 6 tiles each; at 32 rows and 5 CTAs per SM,
# 5376 tiles: 660 CTAs -> 8 or 9 tiles), and added stream-K (`SK=1`: every persistent CTA an equal run of the
# tiles' BK units, a tile split between two CTAs summed by the second to arrive; the CTAs' tile boundaries then
# fall at different times, where balanced whole tiles may turn over in lockstep). This call checks those kernels
# on the GPU (stream-K on tile-major weights is the first GPU use of a tiled segment starting at K > 0), times them
# beside the automatic grid at 28 x 4 (with 7-8 warps per tile too: a CTA's drain lasts about its warps' quads over
# the quads they keep in flight, 7 / 2 at the automatic 4 warps), then the size sweep (the fixed cost F of each) and
# PM samples of the automatic grid, stream-K and the balanced whole tiles.
# On an H200: the CPS rows first (~90 s), then the H200 plan (session28-call3.sh) with what is left.
# Run: BUDGET_S=540 bash lab/plans/session29-call1.sh  (carry [".carry"], timeout_s 580, kind nvidia-h200)
W=/tmp/w29c1; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
D28="G=28,per=4,N=6144,K=3584,tiles=1"
CPSK="PATH=auto;CPS=4;CPS=4,SK=1;CPS=3,SK=1;BN=32,BK=128,MINB=6;BN=32,BK=128,MINB=6,CPS=6;BN=32,BK=128,MINB=6,CPS=6,SK=1"
# Shorter drains: 8 warps split a tile's 28 quads (3-4 each instead of 7), 3 CTAs per SM (80 registers, no spill).
CPSK="$CPSK;BN=32,BK=128,WA=8,MINB=3;BN=32,BK=128,WA=8,MINB=3,CPS=3,SK=1;WA=7,BN=32,BK=128,MINB=3"
# GPU checks of the persistent gemv kernels (tile-major and packed 28 x 4; ragged groups with empty ones).
for kn in "CPS=4" "CPS=4,SK=1" "BN=32,BK=128,MINB=6,CPS=6,SK=1" "COPY=bulk,CPS=4,SK=1"; do
  timeout 60 $K check --backend cuda --op mxfp4_matmul --dims "$D28" --knobs "$kn" --cases 2 2>&1 | tail -1 \
    | sed "s/^/[check $kn] /" >> $L
done
for kn in "PATH=gemv,CPS=4" "PATH=gemv,CPS=2,SK=1,BK=128"; do
  timeout 60 $K check --backend cuda --op mxfp4_matmul --knobs "$kn" --cases 8 2>&1 | tail -1 \
    | sed "s/^/[check $kn random] /" >> $L
done
# The 28 x 4 presets: automatic grid against the persistent ones (tile-major, then packed).
timeout 120 $K bench --op mxfp4_matmul --preset "$P28 tiles" --knobs "$CPSK" --results /nonexistent --out $W/b/cps \
  > $W/cps.txt 2>&1; echo "bench cps rc=$? $(date -u +%T)" >> $L
timeout 60 $K bench --op mxfp4_matmul --preset "$P28" --knobs "PATH=auto;CPS=5;CPS=5,SK=1" --results /nonexistent \
  --out $W/b/cps-packed > $W/cps-packed.txt 2>&1; echo "bench cps packed rc=$? $(date -u +%T)" >> $L
cat $W/cps.txt $W/cps-packed.txt >> $OUT/bench.txt; pack
variants $W/b/cps BN MINB CPS SK WA >> $L; variants $W/b/cps-packed BN MINB CPS SK >> $L
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  summary; BUDGET_S=$(( $(left) - 10 )) OUT=$OUT/h200 exec bash lab/plans/session28-call3.sh
fi
# H100 (or other): the fixed cost of each grid (size sweep, the read floor once), then PM samples of each.
size_sweep "PATH=auto;CPS=4;CPS=4,SK=1"
pm() { local tag=$1; shift
  timeout 60 ncu --section PmSampling --clock-control none --cache-control all --kernel-name "regex:mxfp4_mm" \
    --launch-skip 4 --launch-count 1 -o $W/$tag $K bench --op mxfp4_matmul --preset "$P28 tiles" --knobs "$1" \
    --reps 1 --window-ms 0 --results /nonexistent --out $W/pb > $W/$tag.log 2>&1; echo "ncu $tag rc=$? $(date -u +%T)" >> $L
  timeout 30 python3 lab/plans/session29-pm-raw.py $W/$tag.ncu-rep TriageCompute.dramc__read_throughput \
    gr__ctas_launched sm__cycles_active.avg sm__inst_executed_realtime.avg.pct > $OUT/pm-$tag.txt 2>&1
  echo "dump $tag rc=$? $(wc -l < $OUT/pm-$tag.txt) lines" >> $L; }
[ $(left) -gt 60 ] && pm auto "PATH=auto"
[ $(left) -gt 50 ] && pm sk4 "CPS=4,SK=1"
[ $(left) -gt 40 ] && pm cps4 "CPS=4"
tar czf $OUT/reps.tgz -C $W auto.ncu-rep sk4.ncu-rep cps4.ncu-rep 2>/dev/null
summary
