#!/bin/bash
# One device call (< 10 minutes), carry [".dev/bin/k3k"]; the binary is main (see git log: i45e tip 03057c0 merged) (i45s, i45p and i45e merged).
# (1) issue 45, MMA=f8sync (E4M3 mma.sync for M 8..256): lab/2026-12-07/mx-small-m-fp8/run.sh (<= 150 s).
# (2) issue 45, F8V=6 (the FP8 GEMM's consumer warpgroups taking turns): lab/2026-12-07/mx-fp8-pp/run.sh (<= 150 s).
# (3) issue 42, CHUNK=16 against the defaults at three presets, each kernel alone too (<= 100 s).
# $OUT: f8s.tgz, f8s-table.txt, pp.tgz, pp-table.txt, c16.txt, log.txt
set -u
T0=$(date +%s)
L=$OUT/log.txt
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "start $(date -u +%T) on $GPU" > $L
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
O1=/tmp/o-f8s; O2=/tmp/o-pp; rm -rf $O1 $O2; mkdir -p $O1 $O2
OUT=$O1 timeout ${F8S_S:-160} bash lab/2026-12-07/mx-small-m-fp8/run.sh > $O1/stdout.txt 2>&1
echo "f8sync rc=$? at +$(( $(date +%s) - T0 ))s" >> $L
tar czf $OUT/f8s.tgz -C $O1 . ; cp $O1/table.txt $OUT/f8s-table.txt 2>/dev/null
OUT=$O2 timeout ${PP_S:-160} bash lab/2026-12-07/mx-fp8-pp/run.sh > $O2/stdout.txt 2>&1
echo "pp rc=$? at +$(( $(date +%s) - T0 ))s" >> $L
tar czf $OUT/pp.tgz -C $O2 . ; cp $O2/table.txt $OUT/pp-table.txt 2>/dev/null
S="K128 safe lbsigab gbf16 l2 bsig h0"
[ "${C16:-1}" = 1 ] && K3K_BENCH_STEPS=1 timeout ${C16_S:-110} .dev/bin/k3k bench --op kda --window-ms 60 --out /tmp/o-c16 \
  --preset "B1 T8192 H96 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S" \
  --knobs "TSPLIT=0;CHUNK=16;CHUNK=16,W1=4;CHUNK=16,BV=64,W2=8" > $OUT/c16.txt 2>&1
echo "c16 rc=$? at +$(( $(date +%s) - T0 ))s" >> $L
grep -E ' ms rel|step k3k' $OUT/c16.txt | sed -E 's/ +/ /g' | cut -c1-140 | tail -36
cat $OUT/f8s-table.txt 2>/dev/null | tail -30; cat $OUT/pp-table.txt 2>/dev/null | tail -25; cat $L
