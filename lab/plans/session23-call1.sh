#!/usr/bin/env bash
# Session 23, device call 1 (issue 4): session 22's call 1 (never run: no device was lent in sessions 22 and 23)
# with session 23's COPY=bulk added, in priority order, each step skipped when the budget is short:
# 1. GPU checks: mxfp4_matmul random cases, then the tile-major weights' first GPU runs (their addresses are
#    GPU-only code), per-lane copies and COPY=bulk (whole-block cp.async.bulk copies on stage barriers).
# 2. The tile-major layout (each 16-row block's quad 1 KB contiguous) against the packed one, and COPY=bulk against
#    its per-lane copies, in the same runs, twice.
# 3. MXFP8 activations: the new default (PATH=gemv behind an activation dequant launch, session 22) against
#    PATH=tile (0.1952 ms in session 20), with the bf16 decode alongside, twice.
# 4. The timing experiments (K3K_EXPERIMENT=NOSCALE|NODECODE|NOMMA|NOMATH, wrong values on purpose) between
#    baselines: is the decode or the memory side the bound (static SASS says memory side, session 22 NOTES)?
# 5. L2PF / STAGES=4 / CPS=5 knob sets; 6. the same bytes at K 1792/3584/7168; 7. ncu pipes of the default.
# NOTES session 22 and 23 say what to build for each outcome.
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=540 bash lab/plans/session23-call1.sh  (carry [".carry"], timeout_s 570)
W=/tmp/w23c1; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
timeout 100 $K check --backend cuda --op mxfp4_matmul --cases 10 > $OUT/check.txt 2>&1
echo "check rc=$? $(date -u +%T)" >> $L; tail -3 $OUT/check.txt >> $L
# Tile-major weights: grouped with empty groups, GLU + p, MXFP8 activations and wide scales, dense; per-lane copies
# (default, deeper ring with L2PF) and bulk copies (default ring, deeper ring, 16-row tiles).
for dk in "G=5,c0=4,c1=0,c2=8,c3=1,c4=3,K=512,N=64,tiles=1|PATH=auto" \
          "G=3,c0=8,c1=2,c2=5,K=1024,N=128,tiles=1,epilogue=1,p=1|STAGES=4,L2PF=256" \
          "G=4,per=7,K=384,N=96,tiles=1,act=1,wide=1|PATH=auto" "M=6,K=640,N=160,tiles=1|STAGES=4,L2PF=256" \
          "G=5,c0=4,c1=0,c2=8,c3=1,c4=3,K=512,N=64,tiles=1|COPY=bulk" \
          "G=3,c0=8,c1=2,c2=5,K=1024,N=128,tiles=1,epilogue=1,p=1|COPY=bulk,STAGES=5" \
          "G=4,per=7,K=384,N=96,tiles=1,act=1,wide=1|COPY=bulk,BN=16,STAGES=4"; do
  timeout 40 $K check --backend cuda --op mxfp4_matmul --dims "${dk%|*}" --knobs "${dk#*|}" --cases 3 2>&1 | tail -1 \
    | sed "s/^/[${dk#*|}] /" >> $OUT/check.txt
done
echo "tiles check $(date -u +%T)" >> $L; tail -7 $OUT/check.txt >> $L
# xp EXPERIMENT TAG PRESETS [KNOB SETS]: one bench run; every knob set's line (time, check) into xp.txt.
mkdir -p $W/xp; : > $OUT/xp.txt
xp() { timeout 60 env ${1:+K3K_EXPERIMENT=$1} $K bench --op mxfp4_matmul --preset "$3" --results /nonexistent \
  --out $W/xp/${1:-base}-$2 ${4:+--knobs "$4"} > $W/xp.log 2>&1; echo "xp ${1:-base} $2 rc=$? $(date -u +%T)" >> $OUT/xp.txt
  grep -E "^ +$P28" $W/xp.log | cut -c1-160 >> $OUT/xp.txt; }
# 2. Packed vs tile-major (per-lane copies), then tile-major per-lane vs bulk, twice.
for r in 1 2; do
  [ "$(left)" -gt 200 ] || break
  xp "" tiles-$r "$P28;$P28 tiles" "PATH=auto;STAGES=4;L2PF=256"
  xp "" bulk-$r "$P28 tiles" "PATH=auto;COPY=bulk;COPY=bulk,STAGES=4;COPY=bulk,STAGES=5,MINB=4;COPY=bulk,STAGES=8,MINB=2;COPY=bulk,WA=1,STAGES=8"
done
pack; echo "tiles/bulk $(date -u +%T)" >> $L
# 3. MXFP8 activations: new default (gemv + dequant launch) vs tile, interleaved twice; bf16 activations alongside.
for r in 1 2; do
  [ "$(left)" -gt 180 ] || break
  timeout 60 $K bench --op mxfp4_matmul --preset "$P28 mxfp8-act" --results /nonexistent --out $W/b/act8-$r \
    --knobs "PATH=auto;PATH=tile" >> $OUT/bench.txt 2>&1; echo "act8 $r rc=$? $(date -u +%T)" >> $L
  timeout 40 $K bench --op mxfp4_matmul --preset "$P28" --results /nonexistent --out $W/b/bf16-$r >> $OUT/bench.txt 2>&1
  echo "bf16 $r rc=$? $(date -u +%T)" >> $L
done
pack
# 4. The experiments, baselines between them (same binary, same preset, same data).
if [ "$(left)" -gt 150 ]; then
  xp "" b1 "$P28"; xp NOSCALE 1 "$P28"; xp NODECODE 1 "$P28"; xp "" b2 "$P28"; xp NOMMA 1 "$P28"; xp NOMATH 1 "$P28"
  xp "" b3 "$P28"
fi
# 5. L2PF (cp.async's L2 prefetch size; values unchanged, checked), STAGES=4 and CPS=5 (a persistent grid).
[ "$(left)" -gt 110 ] && xp "" l2pf "$P28" "PATH=auto;L2PF=128;L2PF=256;STAGES=4;STAGES=4,L2PF=256;CPS=5"
pack; echo "experiments $(date -u +%T)" >> $L
# 6. Fill and drain or locality? The same weight bytes as half- and double-length rows (grid >= 4 waves).
[ "$(left)" -gt 80 ] && { timeout 60 $K bench --op mxfp4_matmul --results /nonexistent --out $W/b/shape \
  --dims "G=56,per=4,N=6144,K=1792,packed=1;G=28,per=4,N=6144,K=3584,packed=1;G=14,per=4,N=6144,K=7168,packed=1" \
  > $W/shape.log 2>&1; echo "shapes rc=$? $(date -u +%T)" >> $L; grep -E "GB/s" $W/shape.log | cut -c1-150 >> $OUT/xp.txt; }
pack
# 7. ncu: pipe utilization and instruction mix of the default's main kernel (clocks left alone).
[ "$(left)" -gt 90 ] && { timeout $(( $(left) - 30 )) ncu --clock-control none --kernel-name "regex:mxfp4_mm" --launch-count 1 \
  --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats --section SpeedOfLight \
  $K bench --op mxfp4_matmul --preset "$P28" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb > $OUT/ncu.txt 2>&1
  echo "ncu rc=$? $(date -u +%T)" >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
grep -E "step|ms rel" $OUT/bench.txt | cut -c1-170 | tail -24
cat $OUT/xp.txt
grep -iE "Pipe Utilization|ALU|FMA|Tensor|Issue Slots|Executed Ipc|Duration" $OUT/ncu.txt | head -24
