#!/usr/bin/env bash
# Short device call: (1) ncu full set with source counters of the KDA intra kernel at B1 T8192 H96 with every
# in-kernel option (line info on), for the next step of issue 42; (2) the FP8 MX variants of issue 45
# (lab/2026-12-06/mx-fp8-2/run.sh) if present. Carried: .dev/bin/k3k. $OUT: intra-profile.tgz, details.txt, mx.txt.
set -uo pipefail
T0=$(date +%s); OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"; W=/tmp/prof; mkdir -p $W
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
export K3K_CACHE_DIR=$W/cache
BIN=$PWD/.dev/bin/k3k; NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
P1="B1 T8192 H96 K128 safe lbsigab l2 bsig h0"
$BIN emit --op kda --preset "$P1" --emit cuda > $W/kernels.cu 2>&1
K3K_NVRTC_LINEINFO=1 timeout 150 $NCU --set full --import-source yes --clock-control none --kernel-name regex:k3k_kda_intra \
  --launch-count 1 -o $W/intra $BIN bench --op kda --preset "$P1" --reps 1 --window-ms 0 --out $W/bench > $W/ncu-run.txt 2>&1
echo "ncu rc=$? at $(( $(date +%s) - T0 ))s"
$NCU -i $W/intra.ncu-rep --page details > $W/details.txt 2>&1
$NCU -i $W/intra.ncu-rep --page source --csv --print-source cuda > $W/source-cuda.csv 2>&1
$NCU -i $W/intra.ncu-rep --page source --csv --print-source sass > $W/source-sass.csv 2>&1
cp $W/details.txt $OUT/details.txt
tar czf $OUT/intra-profile.tgz -C $W kernels.cu intra.ncu-rep details.txt source-cuda.csv source-sass.csv ncu-run.txt
if [ -f lab/2026-12-06/mx-fp8-2/run.sh ]; then
  left=$(( 270 - ($(date +%s) - T0) ))
  [ $left -gt 20 ] && OUT=$W/mx timeout $left bash lab/2026-12-06/mx-fp8-2/run.sh > $OUT/mx.txt 2>&1
  echo "mx rc=$? at $(( $(date +%s) - T0 ))s"; tar czf $OUT/mx.tgz -C $W mx 2>/dev/null
fi
grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Registers Per|Achieved Occ|L1/TEX Cache Throughput|Shared" $W/details.txt | head -16
tail -25 $OUT/mx.txt 2>/dev/null
