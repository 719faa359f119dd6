#!/usr/bin/env bash
# RAN as session 28's call 1, on an H100 (lab/2026-12-05/1927-h100-run/). Its L2-fed step
# did not keep the weights in L2 (ncu's kernel replay restores memory between passes): call 2 repeated it with
# application replay.
# Session 28, call 1 (issue 4): can the decode kernel's instruction stream keep up with the H200's bandwidth?
# The H200 has the H100's SMs at the same clock (132 SMs, 1.98 GHz boost) and 1.43x its HBM bandwidth, so if the
# kernel's issue rate is what holds it at 1.23x its read floor there (session 26's hypothesis a), the H100 can show
# it: feed the kernel from L2 instead of HBM. A decode of 66 experts x 4 tokens, N=384, K=1792 (22.7 MB of weights +
# 1.4 MB of scales, inside the 50 MB L2; 396 CTAs of 64 rows = 3 per SM, 792 of 32 rows = 6 per SM, one even wave
# each) is profiled by ncu with `--cache-control none` after four launches, so its weights come from L2: the bytes
# over its duration is the rate the kernel's own instruction stream sustains. Between baselines, NOMATH (decode,
# scale and mma removed) gives the same kernel's rate without the math. The H200's target needs ~3.8 TB/s in the
# kernel (327.5 MB in ~86 us); if the L2-fed kernel is far above that with the math and near NOMATH, the math is not
# the H200's bound. The same metrics of the real 28 x 4 preset, flushed (`--cache-control all`), say how busy the
# issue slots are at the rate HBM allows. Then a tune of the MXFP8-activation preset (no H100 record yet).
# On an H200, session27-call1.sh (the H200 plan) runs first, then the probe with what is left (~190 s).
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=540 bash lab/plans/session28-call1.sh  (carry [".carry"], timeout_s 580)
W=/tmp/w28c1; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
D="G=66,per=4,N=384,K=1792,tiles=1"
S32="BN=32,BK=128,MINB=6"
probe() {
timeout 60 $K check --backend cuda --op mxfp4_matmul --dims "$D" --cases 2 2>&1 | tail -1 | sed "s/^/[$D auto] /" >> $L
timeout 60 $K check --backend cuda --op mxfp4_matmul --dims "$D" --knobs "$S32" --cases 2 2>&1 | tail -1 \
  | sed "s/^/[$D $S32] /" >> $L
# Event-timed (flushed) reference of the small problem.
timeout 60 $K bench --op mxfp4_matmul --dims "$D" --knobs "PATH=auto;$S32" --results /nonexistent --out $W/b \
  >> $OUT/bench.txt 2>&1; echo "bench small rc=$? $(date -u +%T)" >> $L; pack
for kn in PATH=auto $S32; do [ "$(left)" -gt 60 ] || break
  ncu_rate warm-base1 none dims "$D" "$kn"; ncu_rate warm-nomath none dims "$D" "$kn" NOMATH
  ncu_rate warm-base2 none dims "$D" "$kn"; ncu_rate cold-small all dims "$D" "$kn"
done
for kn in PATH=auto $S32; do [ "$(left)" -gt ${1:-120} ] && { ncu_rate cold-28x4 all preset "$P28 tiles" "$kn"
  ncu_rate cold-28x4-nomath all preset "$P28 tiles" "$kn" NOMATH; }; done; }
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  probe; tune_rest "$P28 mxfp8-act"
else
  # An H200: its plan first (its own log), then the probe with what is left (the 28 x 4 steps only with 60 s spare).
  BUDGET_S=$(( $(left) - 190 )) bash lab/plans/session27-call1.sh > /dev/null 2>&1
  mv $OUT/bench.tgz $OUT/bench-h200.tgz
  echo "== session27-call1.sh done $(date -u +%T); the probe:" >> $L; probe 60
  # At most 8 files come back: the smaller ones travel in extra.tgz.
  X="check.txt read-floor.json read-pattern.json peers.txt"
  (cd $OUT && tar czf extra.tgz $X 2>/dev/null; rm -f $X)
fi
summary
python3 lab/plans/session28-rates.py $OUT/ncu-rate.txt 2>&1 | tee -a $L
