#!/bin/bash
# One device call (< 9 minutes), carry [".dev/bin/k3k"]: (1) issue 42's intra-kernel profile (ncu full set with
# source counters, line info on) at B1 T8192 H96; (2) issue 45's MMA=fp8 generations F8V=1/2/3
# (lab/2026-12-06/mx-fp8-2/run.sh); (3) issue 45's baseline: MXFP8-activation M = 8..256 at N6144 K3584, k3k's
# defaults against cuBLAS bf16 and torch._scaled_mm FP8 rowwise, same run. Results under $OUT (<= 8 files).
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
W=/tmp/w; mkdir -p $W/profile $W/sweep $W/fp8; B=.dev/bin/k3k; L=$OUT/log.txt
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $L
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
P1="B1 T8192 H96 K128 safe lbsigab l2 bsig h0"
# 1. intra profile
$B emit --op kda --preset "$P1" --emit cuda > $W/profile/kernels.cu 2>&1
K3K_NVRTC_LINEINFO=1 K3K_CACHE_DIR=$W/cache timeout 150 $NCU --set full --import-source yes --clock-control none \
  --kernel-name regex:k3k_kda_intra --launch-count 1 -o $W/profile/intra $B bench --op kda --preset "$P1" \
  --reps 1 --window-ms 0 --out $W/ncu-bench > $W/profile/ncu-run.txt 2>&1; log "profile rc=$?"
$NCU -i $W/profile/intra.ncu-rep --page details > $W/profile/details.txt 2>&1
$NCU -i $W/profile/intra.ncu-rep --page source --csv --print-source cuda > $W/profile/source-cuda.csv 2>&1
$NCU -i $W/profile/intra.ncu-rep --page source --csv --print-source sass > $W/profile/source-sass.csv 2>&1
rm -f $W/profile/intra.ncu-rep.bak; tar czf $OUT/intra-profile.tgz -C $W profile
grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Registers Per|Achieved Occ" $W/profile/details.txt | head -12 >> $L
# 1b. intra-kernel knob sensitivity at the same preset (each set checked; step times logged)
K3K_BENCH_STEPS=1 timeout 90 $B bench --op kda --preset "$P1" --window-ms 100 --out $W/kdasweep \
  --knobs "TSPLIT=0;W1=4;W1=16;CHUNK=64;EX2=exact;OPDT=bf16" > $W/profile/knob-sweep.txt 2>&1; log "kda sweep rc=$?"
grep -E "step k3k_kda_intra|knobs|custom|ms rel" $W/profile/knob-sweep.txt | head -40 >> $L
# 2. fp8 generations
OUT=$W/fp8 timeout 230 bash lab/2026-12-06/mx-fp8-2/run.sh > $W/fp8/run.txt 2>&1; log "fp8 rc=$?"
cp $W/fp8/table.txt $OUT/fp8-table.txt 2>/dev/null
# 3. M sweep + peers
D=""; for m in 8 16 32 64 128 256; do D="$D;M=$m,N=6144,K=3584,act=1"; done; D=${D#;}
timeout 120 $B bench --op mxfp4_matmul --dims "$D" --out $W/sweep > $W/sweep/bench.txt 2>&1; log "sweep rc=$?"
SLUG=$(ls $W/sweep | grep -v txt | head -1)
timeout 120 python3 scripts/peers.py $W/sweep/$SLUG --out $W/sweep/peers.json > $W/sweep/peers.txt 2>&1; log "peers rc=$?"
$B bench --merge-peers $W/sweep/peers.json --out $W/sweep >> $W/sweep/bench.txt 2>&1
tar czf $OUT/fp8-sweep.tgz -C $W fp8 sweep
log end
tail -12 $W/fp8/table.txt 2>/dev/null
grep '^{' $W/sweep/peers.txt | cut -c1-200
grep -E '^\| (custom|M)' $W/sweep/$SLUG/mxfp4_matmul.md 2>/dev/null | cut -d'|' -f2-7 | head -20
tail -5 $L
