#!/bin/bash
# One device call (< 10 minutes), carry [".dev/bin/k3k", ".dev/peers"]; the binary is main ce10b61.
# (1) issue 42: CHUNK=16 (FlashKDA's chunk, accepted since ce10b61) against the defaults at B1 T8192 H96, B4 T4096 H64
#     and varlen 8x1024 H96, each kernel timed alone too (K3K_BENCH_STEPS=1); not merged into the reports.
# (2) issue 42: kda at the defaults (FULLC=1, GSIG=fast, L2R=unrolled) on the six FlashKDA presets and the five earlier
#     ones, FlashKDA in the same run, into the committed reports (SEED=1; the FLA rows are kept from their run):
#     scripts/gpu_kda_flashkda.sh with NCU=0 SWEEP=0 FLA=0 OLD=1.
# $OUT: c16.txt, kda.tgz, kda-summary.md, log.txt
set -u
T0=$(date +%s)
L=$OUT/log.txt
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "start $(date -u +%T) on $GPU" > $L
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
S="K128 safe lbsigab gbf16 l2 bsig h0"
K3K_BENCH_STEPS=1 timeout ${C16_S:-100} .dev/bin/k3k bench --op kda --window-ms 60 --out /tmp/o-c16 \
  --preset "B1 T8192 H96 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S" \
  --knobs "TSPLIT=0;CHUNK=16;CHUNK=16,W1=4;CHUNK=16,BV=64,W2=8" > $OUT/c16.txt 2>&1
echo "c16 rc=$? at +$(( $(date +%s) - T0 ))s" >> $L
OUT_KDA=/tmp/o-kda; rm -rf $OUT_KDA; mkdir -p $OUT_KDA
OUT=$OUT_KDA SEED=1 NCU=0 SWEEP=0 FLA=0 OLD=1 BUDGET_S=${KDA_S:-450} bash scripts/gpu_kda_flashkda.sh > $OUT_KDA/stdout.txt 2>&1
echo "kda rc=$? at +$(( $(date +%s) - T0 ))s" >> $L
tar czf $OUT/kda.tgz -C $OUT_KDA . ; cp $OUT_KDA/summary.md $OUT/kda-summary.md 2>/dev/null
grep -E ' ms rel|step k3k|^  [A-Za-z]' $OUT/c16.txt | sed -E 's/ +/ /g' | cut -c1-160 | tail -40
cat $L; cat $OUT/kda-summary.md 2>/dev/null | head -12
