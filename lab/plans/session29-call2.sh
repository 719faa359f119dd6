#!/usr/bin/env bash
# RAN as session 30 call 1 on an H100 (lab/2026-12-05/2359-h100-run/; NOTES, session 30).
# Session 29, call 2 (issue 4): the tail split (`TS`). Call 1 (H100) found that the persistent grids lose (a 7 us
# prologue; equal static shares still end ~15 us apart, the CTAs' rates differing by ~10%), while the
# hardware-scheduled grid's dynamic hand-out absorbs rate differences and leaves only its last tiles' drain (8.5 us
# of lost DRAM time). `TS=n` keeps that grid and splits the last n groups' tiles (the CTAs launched last) into two
# K halves, summed by the second to arrive: the last wave's CTAs then stream half a tile each. 28 x 4 at 64 rows has
# 96 tiles per group and 528 resident CTAs (~5.5 groups per wave): TS=6 splits about the last wave, TS=11 two.
# This call checks TS on the GPU (tile-major halves start at K = 1792: tiled views from K > 0), times it at 28 x 4
# (tile-major and packed) and, on an H100, at 14-112 experts with PM samples; on an H200 it goes on with the H200
# plan (session28-call3.sh).
# Run: BUDGET_S=540 bash lab/plans/session29-call2.sh  (carry [".carry"], timeout_s 580, kind nvidia-h200)
W=/tmp/w29c2; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
D28="G=28,per=4,N=6144,K=3584,tiles=1"
for kn in "TS=6" "TS=6,COPY=bulk" "BN=32,BK=128,MINB=5,TS=6"; do
  timeout 60 $K check --backend cuda --op mxfp4_matmul --dims "$D28" --knobs "$kn" --cases 2 2>&1 | tail -1 \
    | sed "s/^/[check $kn] /" >> $L
done
timeout 60 $K check --backend cuda --op mxfp4_matmul --knobs "PATH=gemv,TS=3,BK=128" --cases 8 2>&1 | tail -1 \
  | sed "s/^/[check PATH=gemv,TS=3,BK=128 random] /" >> $L
TSK="PATH=auto;TS=2;TS=4;TS=6;TS=8;TS=11;BN=32,BK=128,MINB=6;BN=32,BK=128,MINB=5;BN=32,BK=128,MINB=5,TS=6"
timeout 120 $K bench --op mxfp4_matmul --preset "$P28 tiles" --knobs "$TSK" --results /nonexistent --out $W/b/ts \
  > $W/ts.txt 2>&1; echo "bench ts rc=$? $(date -u +%T)" >> $L
timeout 60 $K bench --op mxfp4_matmul --preset "$P28" --knobs "PATH=auto;TS=6;TS=11" --results /nonexistent \
  --out $W/b/ts-packed > $W/ts-packed.txt 2>&1; echo "bench ts packed rc=$? $(date -u +%T)" >> $L
cat $W/ts.txt $W/ts-packed.txt >> $OUT/bench.txt; pack
variants $W/b/ts BN MINB TS >> $L; variants $W/b/ts-packed TS >> $L
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  # (At most 8 files come back: this call's three go into one, the H200 plan's into $OUT/h200.)
  summary; tar czf $OUT/ts.tgz -C $OUT log.txt bench.txt bench.tgz && rm -f $OUT/log.txt $OUT/bench.txt $OUT/bench.tgz
  BUDGET_S=$(( $(left) - 10 )) OUT=$OUT/h200 exec bash lab/plans/session28-call3.sh
fi
size_sweep "PATH=auto;TS=6;TS=11" NOREAD
[ $(left) -gt 50 ] && pm_sample ts6 "$P28 tiles" "TS=6"
[ $(left) -gt 40 ] && pm_sample ts11 "$P28 tiles" "TS=11"
[ $(left) -gt 30 ] && pm_sample auto "$P28 tiles" "PATH=auto"
tar czf $OUT/reps.tgz -C $W ts6.ncu-rep ts11.ncu-rep auto.ncu-rep 2>/dev/null
summary
