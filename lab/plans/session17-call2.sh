#!/usr/bin/env bash
# Session 17, device call 2: the 28 x 4 MXFP4 decode (packed, layout v2) around the tuned gemv point of call 1
# (0.1278 ms: BK=512 BN=32 GR=2 MINB=4 PF=on SPLIT=1 STAGES=3 WA=4): occupancy (MINB, WA), ring depth and kind
# (STAGES, GR), batch (BK), rows per CTA (BN), K splits, all timed in one bench run (every set's time is kept in
# the JSON), then the dense M1 / M16 gemv the same way, and ncu (clocks left alone) of the 28 x 4 winner:
# speed of light, occupancy, warp states and memory. No knob is changed by this call.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=300 bash lab/plans/session17-call2.sh  (carry [".carry"], timeout_s 330)
W=/tmp/w17b; source lab/plans/lib.sh
B="PATH=gemv,PF=on,SPLIT=1"
T="$B,BK=512,BN=32,GR=2,MINB=4,STAGES=3,WA=4"
SETS="$T;$B,BK=512,BN=32,GR=2,MINB=5,STAGES=3,WA=4;$B,BK=512,BN=32,GR=2,MINB=6,STAGES=3,WA=4"
SETS="$SETS;$B,BK=512,BN=32,GR=2,MINB=8,STAGES=3,WA=4;$B,BK=512,BN=32,GR=2,MINB=2,STAGES=3,WA=8"
SETS="$SETS;$B,BK=512,BN=32,GR=2,MINB=4,STAGES=4,WA=4;$B,BK=512,BN=32,GR=2,MINB=4,STAGES=6,WA=4"
SETS="$SETS;$B,BK=512,BN=32,GR=2,MINB=4,STAGES=0,WA=4;$B,BK=512,BN=32,GR=4,MINB=4,STAGES=0,WA=4"
SETS="$SETS;$B,BK=1024,BN=32,GR=2,MINB=4,STAGES=3,WA=4;$B,BK=256,BN=32,GR=2,MINB=4,STAGES=3,WA=4"
SETS="$SETS;$B,BK=512,BN=64,GR=1,MINB=2,STAGES=3,WA=4;$B,BK=512,BN=16,GR=4,MINB=8,STAGES=3,WA=4"
SETS="$SETS;PATH=gemv,PF=on,SPLIT=2,BK=512,BN=32,GR=2,MINB=4,STAGES=3,WA=4;$B,BK=512,BN=32,GR=2,MINB=4,STAGES=3,WA=2"
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
timeout 150 $K bench --op mxfp4_matmul --preset "$P28" --results /nonexistent --knobs "$SETS" --out $W/sw > $OUT/sweep.txt 2>&1
echo "sweep 28x4 rc=$? $(date -u +%T)" >> $L
D="PATH=gemv,SPLIT=0"
SETS1="PATH=auto;$D,MINB=4,STAGES=3;$D,MINB=6,STAGES=3;$D,MINB=4,STAGES=0,GR=4;$D,BK=256,MINB=4,STAGES=4;$D,BN=16,MINB=8,STAGES=3"
timeout 70 $K bench --op mxfp4_matmul --preset "MXFP4 linear M1 N6144 K3584;MXFP4 linear M16 N6144 K3584" --results /nonexistent \
  --knobs "$SETS1" --out $W/sw1 >> $OUT/sweep.txt 2>&1; echo "sweep M1/M16 rc=$? $(date -u +%T)" >> $L
tar czf $OUT/sweep.tgz -C $W sw sw1 2>/dev/null
mkdir -p $W/prof
SEC="--section SpeedOfLight --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats --section SchedulerStats"
timeout 80 ncu --clock-control none --kernel-name "regex:mxfp4" --launch-count 1 $SEC -o $W/prof/g28 \
  $K bench --op mxfp4_matmul --preset "$P28" --reps 1 --window-ms 0 --results /nonexistent --knobs "$T" --out $W/pb > $W/prof/g28.log 2>&1
echo "ncu rc=$? $(date -u +%T)" >> $L
ncu -i $W/prof/g28.ncu-rep --page details > $W/prof/g28.txt 2>&1
tar czf $OUT/prof.tgz --exclude='*.ncu-rep' -C $W prof
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "^\s+MXFP4" $OUT/sweep.txt | sed 's/rel .* ok \[/[/' | cut -c1-200
grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Eligible|Issued Warp|No Eligible|Active Warps" $W/prof/g28.txt | head -24
