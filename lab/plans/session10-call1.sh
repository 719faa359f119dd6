#!/usr/bin/env bash
# Session 10, device call 1: where the time goes (no timing claims from ncu: it replays each kernel).
# ncu (clocks left alone) with PC-sampling stall counters per SASS instruction on the kernels the open targets are
# stuck on: kda state pass at T65536 H32 (TSPLIT=1, so the kernel runs alone) and at T8192 H96, kda intra at T8192
# H96, the MXFP4 gemv at 28 experts x 4 tokens and at M1 (their tuned records). Then the streaming-read floor at the
# decode presets' byte counts (lab/plans/session10-read-floor.py) and the mxfp4 decode presets timed by k3k in
# the same call. Run: bash lab/plans/session10-call1.sh (carry [".carry"], timeout_s ~400)
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w10a; rm -rf $W; mkdir -p $W/prof "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$W/triton
L=$OUT/log.txt; echo "start $(date -u +%T)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv >> $L 2>&1
SEC="--section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy"
prof() { # name op preset knobs regex
  timeout 100 ncu --clock-control none --kernel-name "regex:$5" --launch-count 1 $SEC -o $W/prof/$1 \
    $K bench --op "$2" --preset "$3" ${4:+--knobs "$4"} --reps 2 --window-ms 0 --out $W/pb > $W/prof/$1.log 2>&1
  echo "prof $1 rc=$? $(date -u +%T)" >> $L
  ncu -i $W/prof/$1.ncu-rep --page details > $W/prof/$1.txt 2>&1
  ncu -i $W/prof/$1.ncu-rep --page source --csv --print-source sass > $W/prof/$1.sass.csv 2>&1
  echo "  export rc=$? $(wc -c < $W/prof/$1.sass.csv) bytes" >> $L
}
prof kda-state-t65536 kda "B1 T65536 H32 K128 safe" "TSPLIT=1" "kda_state"
prof kda-state-t8192 kda "B1 T8192 H96 K128 safe" "" "kda_state"
prof kda-intra-t8192 kda "B1 T8192 H96 K128 safe" "" "kda_intra"
prof mx-28x4 mxfp4_matmul "MXFP4 decode 28 experts x 4 tokens N6144 K3584" "BK=512,BN=32,GR=2,MINB=4,PF=on,WA=4,SPLIT=1,PATH=gemv" "mxfp4_mm"
prof mx-m1 mxfp4_matmul "MXFP4 linear M1 N6144 K3584" "BN=32" "mxfp4_mm"
tar czf $OUT/prof.tgz --exclude='*.ncu-rep' -C $W prof
timeout 120 python3 lab/plans/session10-read-floor.py $OUT/read-floor.json > $OUT/read-floor.txt 2>&1
echo "read floor rc=$? $(date -u +%T)" >> $L
timeout 90 $K bench --op mxfp4_matmul --preset "MXFP4 linear M1 N6144 K3584;MXFP4 linear M16 N6144 K3584;MXFP4 decode 28 experts x 4 tokens N6144 K3584" --out $W/b > $OUT/bench.txt 2>&1
echo "bench rc=$? $(date -u +%T)" >> $L
tar czf $OUT/bench.tgz -C $W b 2>/dev/null
echo "end $(date -u +%T)" >> $L
cat $L; cat $OUT/read-floor.txt
for f in $W/prof/*.txt; do echo "== $(basename $f)"; grep -E "Duration|DRAM Throughput|Issue Slots Busy|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" $f | cut -c1-110 | head -8; done
grep -h "^| " $W/b/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-5
