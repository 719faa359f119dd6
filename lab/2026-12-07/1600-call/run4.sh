#!/bin/bash
# Device call, carry [".dev"]: .dev/bin/k3k (this checkout: kda's intra kernel without the dead bias copy under
# IMAP=gate), .dev/bin/k3k-old (2a45191, before it), FlashKDA sources, FLA wheels.
# (1) GPU checks of the new kda kernels: random problems, and the FlashKDA options with a varlen batch and a partial chunk.
# (2) new against old at B1 T8192 H96, B4 T4096 H64, varlen 8x1024 (the whole plan), in the order new old old new.
# (3) On an H200 with the time left: issue 42's report with the new binary (scripts/gpu_kda_flashkda.sh, FLA=0).
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o4}; mkdir -p $OUT; L=$OUT/log.txt
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU"
S="K128 safe lbsigab gbf16 l2 bsig h0"
{ timeout 60 .dev/bin/k3k check --backend cuda --op kda --cases 6 --seed 4207 2>&1 | tail -3
  timeout 40 .dev/bin/k3k check --backend cuda --op kda --seed 4208 --cases 2 \
    --dims "N=3,L0=1300,L1=547,L2=70,H=4,HV=4,K=128,V=128,safe=1,gate=3,bias=1,l2norm=1,bsig=1,gbf16=1,h0=1" 2>&1 | tail -2
} > $OUT/check.txt 2>&1; log "checks: $(grep -E 'kda +cuda' $OUT/check.txt | tr -s ' ' | tr '\n' ';')"
P="B1 T8192 H96 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S"
for b in k3k k3k-old k3k-old k3k; do
  timeout 60 .dev/bin/$b bench --op kda --window-ms 100 --preset "$P" --out /tmp/ab-$b > $OUT/ab-$b-$(date +%s).txt 2>&1
  log "bench $b rc=$?: $(grep -E ' ms ' $OUT/ab-$b-*.txt | tail -3 | grep -oE '[0-9.]+ ms' | tr '\n' ' ')"
done
if echo "$GPU" | grep -q H200; then
  LEFT=$(( ${BUDGET_S:-420} - ($(date +%s) - T0) ))
  [ $LEFT -ge 200 ] && OUT=$OUT SEED=1 NCU=0 SWEEP=0 OLD=1 FLA=0 BUDGET_S=$LEFT bash scripts/gpu_kda_flashkda.sh > $OUT/report-stdout.txt 2>&1
  log "report rc=$? (left ${LEFT}s)"; cat $OUT/summary.md 2>/dev/null | head -12
fi
cat $L
