#!/usr/bin/env bash
# Session 26, the H200 call (issue 4), whenever one comes: session26-call1.sh (which ran on an H100) with the timing
# experiment and the read floor of session26-call2.sh folded in, since H200 calls are rare. The H100 measurements
# of sessions 25-26 say: XA=2 takes 2-8% off every 28 x 4 preset; 32-row CTAs of 128-column batches at MINB=6 a
# further 2% (tile-major) and 5-6% (SiTU-GLU + p, as does BN=64 BK=128 MINB=4 there); ncu puts the tile-major
# default at 82.8% of DRAM peak. Counting the SASS of the default's main loop (session 26): ~520 instructions per
# 4352-byte quad per warp (0.12 per byte; 4 HMUL2 + 5 LOP3 + 2 SHF + ~1.8 IMAD per HMMA), so at the 95 us target
# the H200's SMs must issue ~2 instructions per cycle (~50% of peak issue) under heavy load latency, against ~35% on
# the H100 at its rate: NOMATH tells whether that is the bound there. In priority order:
# 1. GPU checks at the new defaults (10 random cases; the tile-major and GLU 28 x 4 defaults);
# 2. the four 28 x 4 presets at the defaults (XA=2), XA=1 and the H100's shapes, cuBLAS in the same call;
# 3. the streaming-read floor (session 10's script) in the same call;
# 4. NOMATH between baselines at the automatic shape and at BN=32 BK=128 MINB=6;
# 5. ncu of the tile-major default (stall reasons, issue rate, DRAM);
# 6. a re-tune of the tile-major preset with what is left (up to 64 candidates; MINB now reaches 6).
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=540 bash lab/plans/session26-h200.sh  (carry [".carry"], timeout_s 570, kind nvidia-h200)
W=/tmp/w26h; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
timeout 80 $K check --backend cuda --op mxfp4_matmul --cases 10 > $OUT/check.txt 2>&1
echo "check rc=$? $(date -u +%T)" >> $L; tail -1 $OUT/check.txt >> $L
for d in "G=28,per=4,N=6144,K=3584,tiles=1" "G=28,per=4,N=6144,K=3584,packed=1,epilogue=1,p=1"; do
  timeout 40 $K check --backend cuda --op mxfp4_matmul --dims "$d" --cases 2 2>&1 | tail -1 | sed "s/^/[$d] /" >> $L
done
op mxfp4_matmul 260 60 --preset "$P28 tiles;$P28;$P28 situ_glu+p;$P28 mxfp8-act" \
  --knobs "PATH=auto;XA=1;BN=32,BK=128,MINB=6;BN=64,BK=128,MINB=4"
[ "$(left)" -gt 200 ] && { timeout 90 python3 lab/plans/session10-read-floor.py $OUT/read-floor.json > $W/read-floor.txt 2>&1
  echo "read floor rc=$? $(date -u +%T)" >> $L; tail -6 $W/read-floor.txt >> $L; }
mkdir -p $W/xp; : > $W/xp.txt
xp() { timeout 50 env ${1:+K3K_EXPERIMENT=$1} $K bench --op mxfp4_matmul --preset "$3" --results /nonexistent \
  --out $W/xp/${1:-base}-$2 ${4:+--knobs "$4"} > $W/xp.log 2>&1; echo "xp ${1:-base} $2 rc=$? $(date -u +%T)" >> $W/xp.txt
  grep -E "^ +$P28" $W/xp.log | cut -c1-170 >> $W/xp.txt; }
S32="BN=32,BK=128,MINB=6"
[ "$(left)" -gt 170 ] && { xp "" b1 "$P28 tiles" "PATH=auto;$S32"; xp NOMATH 1 "$P28 tiles" "PATH=auto;$S32"
  xp "" b2 "$P28 tiles" "PATH=auto;$S32"; cat $W/xp.txt >> $L; }
[ "$(left)" -gt 80 ] && { timeout 60 ncu --clock-control none --kernel-name "regex:mxfp4_mm" --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section SchedulerStats $K bench --op mxfp4_matmul --preset "$P28 tiles" --reps 1 --window-ms 0 \
  --results /nonexistent --out $W/pb > $OUT/ncu.txt 2>&1; echo "ncu rc=$? $(date -u +%T)" >> $L; }
t=$(( $(left) - 20 ))
[ $t -gt 60 ] && { timeout $(( t + 10 )) $K tune --op mxfp4_matmul --preset "$P28 tiles" --budget ${t}s --max-candidates 64 \
  --results $W/results > $W/tune.log 2>&1; echo "tune rc=$? $(date -u +%T)" >> $L
  grep -E "^mxfp4_matmul " $W/tune.log | cut -c1-220 >> $L; pack; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "ms rel|GB/s" $OUT/bench.txt | cut -c1-200 | tail -20
grep -iE "DRAM Throughput|Duration|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots|No Eligible|One or More" $OUT/ncu.txt | head -12
