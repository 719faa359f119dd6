#!/usr/bin/env bash
# Session 22, device call 1 (issue 4). Two questions about the MXFP4 decode, in one call:
# 1. MXFP8 activations (K3's expert inputs) now take PATH=gemv behind an activation dequant launch (session 22):
#    GPU check of mxfp4_matmul (random cases include MXFP8 activations at decode sizes), then the 28 x 4 decode with
#    MXFP8 activations, the new default against PATH=tile (the old default, 0.1952 ms in session 20), interleaved,
#    per-launch times in bench.txt ("step" lines), and the bf16-activation decode as the reference point.
# 2. What bounds the 28 x 4 gemv (0.117 ms, 1.38x the 84.7 us read floor): the default timed against the four
#    timing experiments of K3K_EXPERIMENT (k3k_codegen::EXPERIMENTS: NOSCALE, NODECODE, NOMMA, NOMATH: each
#    removes a piece of the product; wrong values on purpose, their checks fail), baselines between them; the
#    tile-major weight layout (session 22: `tiles`, each 16-row block's quad 1 KB contiguous instead of 64 B per
#    row; checked on the GPU first) against the packed one; and the new L2PF knob (cp.async's L2 prefetch size on
#    the same copies, values unchanged) against the default in the same runs.
#    If NODECODE is near the baseline, the decode is not the bound and the FP8-mma decode of the NOTES would not
#    pay; if NOMATH is near the floor, it would. Static SASS (scripts/sass_loops.py, session 22 NOTES): the FAST
#    ring's loop issues 623 instructions per two quads (NODECODE 274, NOMATH 212), ~55% of the issue slots at
#    0.117 ms, so the experiments are expected to show a memory-side bound. Then the same bytes at three row
#    lengths (fill and drain against locality) and ncu pipe utilization of the default (ALU / FMA / tensor).
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=540 bash lab/plans/session22-call1.sh  (carry [".carry"], timeout_s 570)
W=/tmp/w22c1; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
timeout 100 $K check --backend cuda --op mxfp4_matmul --cases 10 > $OUT/check.txt 2>&1
echo "check rc=$? $(date -u +%T)" >> $L; tail -3 $OUT/check.txt >> $L
# The tile-major weights' first GPU run (their addresses are GPU-only code): grouped with empty groups, GLU + p,
# MXFP8 activations and wide scales, dense; default knobs and a deeper ring with L2PF.
for dk in "G=5,c0=4,c1=0,c2=8,c3=1,c4=3,K=512,N=64,tiles=1|PATH=auto" \
          "G=3,c0=8,c1=2,c2=5,K=1024,N=128,tiles=1,epilogue=1,p=1|STAGES=4,L2PF=256" \
          "G=4,per=7,K=384,N=96,tiles=1,act=1,wide=1|PATH=auto" "M=6,K=640,N=160,tiles=1|STAGES=4,L2PF=256"; do
  timeout 40 $K check --backend cuda --op mxfp4_matmul --dims "${dk%|*}" --knobs "${dk#*|}" --cases 3 2>&1 | tail -1 \
    >> $OUT/check.txt
done
echo "tiles check $(date -u +%T)" >> $L; tail -4 $OUT/check.txt >> $L
# 1. MXFP8 activations: new default (gemv + dequant launch) vs tile, interleaved twice; bf16 activations alongside.
for r in 1 2; do
  timeout 60 $K bench --op mxfp4_matmul --preset "$P28 mxfp8-act" --results /nonexistent --out $W/b/act8-$r \
    --knobs "PATH=auto;PATH=tile" >> $OUT/bench.txt 2>&1; echo "act8 $r rc=$? $(date -u +%T)" >> $L
  timeout 40 $K bench --op mxfp4_matmul --preset "$P28" --results /nonexistent --out $W/b/bf16-$r >> $OUT/bench.txt 2>&1
  echo "bf16 $r rc=$? $(date -u +%T)" >> $L
done
pack
# 2. The experiments, baselines between them (same binary, same preset, same data).
# xp EXPERIMENT TAG [KNOB SETS]: one bench run; every knob set's line (time, check) into xp.txt.
xp() { timeout 50 env ${1:+K3K_EXPERIMENT=$1} $K bench --op mxfp4_matmul --preset "$P28" --results /nonexistent \
  --out $W/xp/${1:-base}-$2 ${3:+--knobs "$3"} > $W/xp.log 2>&1; echo "xp ${1:-base} $2 rc=$?" >> $OUT/xp.txt
  grep -E "^ +$P28 " $W/xp.log | cut -c1-150 >> $OUT/xp.txt; }
mkdir -p $W/xp; : > $OUT/xp.txt
xp "" b1; xp NOSCALE 1; xp NODECODE 1; xp "" b2; xp NOMMA 1; xp NOMATH 1; xp "" b3
# The tile-major layout (the same bytes, each 16-row block's quad contiguous: DRAM locality) against the packed
# layout in the same runs, also with a deeper ring (STAGES=4: slower than 3 in session 17, 0.1362 vs 0.1218 ms,
# which fits a locality bound) and L2PF, twice.
for r in 1 2; do
  timeout 80 $K bench --op mxfp4_matmul --preset "$P28;$P28 tiles" --results /nonexistent --out $W/b/tiles-$r \
    --knobs "PATH=auto;STAGES=4;L2PF=256" > $W/tiles.log 2>&1; echo "tiles $r rc=$?" >> $OUT/xp.txt
  grep -E "^ +$P28" $W/tiles.log | cut -c1-160 >> $OUT/xp.txt
done
# The L2PF knob (cp.async's L2 prefetch size on the staged ring's copies; values unchanged, checked), and CPS=5
# (a persistent grid of 5 CTAs per SM: no CTA launches, each tile's ring still fills and drains), twice.
for r in 1 2; do xp "" l2pf-$r "PATH=auto;L2PF=128;L2PF=256;STAGES=4;STAGES=4,L2PF=256;CPS=5"; done
pack; echo "experiments $(date -u +%T)" >> $L
# 3. Fill and drain or locality? The same weight bytes (28 x 6144 x 3584) as half-length and double-length rows
#    (experts doubled or halved, so the grid stays >= 4 waves of 660 CTAs): each gemv CTA streams whole rows of K.
#    Longer rows amortize a CTA's ring fill and drain (faster if those bound it) but spread each row's reads over a
#    longer CTA life (slower if DRAM locality bounds it).
timeout 60 $K bench --op mxfp4_matmul --results /nonexistent --out $W/b/shape \
  --dims "G=56,per=4,N=6144,K=1792,packed=1;G=28,per=4,N=6144,K=3584,packed=1;G=14,per=4,N=6144,K=7168,packed=1" \
  > $W/shape.log 2>&1; echo "shapes rc=$? $(date -u +%T)" >> $L; grep -E "GB/s" $W/shape.log | cut -c1-150 >> $OUT/xp.txt
pack
# 4. ncu: pipe utilization and instruction mix of the default's main kernel (clocks left alone).
[ "$(left)" -gt 90 ] && { timeout $(( $(left) - 30 )) ncu --clock-control none --kernel-name "regex:mxfp4_mm" --launch-count 1 \
  --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats --section SpeedOfLight \
  $K bench --op mxfp4_matmul --preset "$P28" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb > $OUT/ncu.txt 2>&1
  echo "ncu rc=$? $(date -u +%T)" >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
grep -E "step|ms rel" $OUT/bench.txt | cut -c1-170 | tail -24
cat $OUT/xp.txt
grep -iE "Pipe Utilization|ALU|FMA|Tensor|Issue Slots|Executed Ipc|Duration" $OUT/ncu.txt | head -24
