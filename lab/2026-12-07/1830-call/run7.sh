#!/bin/bash
# Device call, carry [".dev/bin"] (+ ".dev/peers", ".dev/whl" for the report on an H200): .dev/bin/k3k (branch
# kda-mma-origins: kda's mma.sync loads addressed from per-thread origins, MADDR=origin; every other operator's
# kernels byte-identical), .dev/bin/k3k-head (main f11172f), .dev/bin/k3k-old (2a45191, before the kda bias change),
# .dev/bin/gpu_primitives (codegen's primitive cases on the GPU, with the four mma forms addressed from origins).
# (1) GPU checks: the primitive cases, kda random cases, kda's FlashKDA options with a varlen batch and a partial chunk.
# (2) kda A/B, interleaved new head new head, at the old and the FlashKDA presets.
# (3) With the time left: on an H200, issue 42's report with the new binary (FLA=0); on an H100, issue 45's
#     wide-tile rows (1600-call/run5.sh).
set -u
T0=$(date +%s); BUDGET=${BUDGET_S:-570}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o7}; mkdir -p $OUT/ab; L=$OUT/log.txt
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(date -u +%FT%TZ)"
K3K_GPU=1 timeout 60 .dev/bin/gpu_primitives > $OUT/gpu_primitives.txt 2>&1
log "gpu_primitives rc=$? $(grep -c 'gpu ok' $OUT/gpu_primitives.txt) ok, $(grep -c 'gpu FAILED' $OUT/gpu_primitives.txt) failed: $(grep 'gpu FAILED' $OUT/gpu_primitives.txt | head -3)"
timeout 90 .dev/bin/k3k check --backend cuda --op kda --cases 8 --seed 4711 > $OUT/check-kda.txt 2>&1
log "check kda rc=$?: $(grep -E 'kda +cuda' $OUT/check-kda.txt | tr -s ' ')"
timeout 40 .dev/bin/k3k check --backend cuda --op kda --seed 4712 --cases 2 \
  --dims "N=3,L0=1300,L1=547,L2=70,H=4,HV=4,K=128,V=128,safe=1,gate=3,bias=1,l2norm=1,bsig=1,gbf16=1,h0=1" > $OUT/check-kda-fk.txt 2>&1
log "check kda varlen FK rc=$?: $(grep -E 'kda +cuda' $OUT/check-kda-fk.txt | tr -s ' ')"
S="K128 safe lbsigab gbf16 l2 bsig h0"
P="B1 T8192 H96 K128 safe;B1 T65536 H32 K128 safe;B1 T8192 H96 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S"
for b in k3k k3k-head k3k k3k-head; do
  [ $(left) -lt 75 ] && { log "kda $b: skipped ($(left)s left)"; continue; }
  timeout 70 .dev/bin/$b bench --op kda --window-ms 100 --preset "$P" --out /tmp/ab-$b > $OUT/ab/kda-$b-$(date +%s).txt 2>&1
  log "kda $b rc=$?"
done
if echo "$GPU" | grep -q H200 && [ $(left) -ge 200 ] && [ -d .dev/peers ]; then
  mkdir -p $OUT/rep; OUT=$OUT/rep SEED=1 NCU=0 SWEEP=0 OLD=1 FLA=0 BUDGET_S=$(( $(left) - 10 )) bash scripts/gpu_kda_flashkda.sh > $OUT/report-stdout.txt 2>&1
  log "report rc=$?"; head -12 $OUT/rep/summary.md 2>/dev/null
elif [ $(left) -ge 130 ]; then
  mkdir -p $OUT/r45; OUT=$OUT/r45 timeout $(( $(left) - 5 )) bash lab/2026-12-07/1600-call/run5.sh > $OUT/r45/stdout.txt 2>&1
  log "r45 rc=$?"; tail -n 16 $OUT/r45/stdout.txt
fi
cd $OUT/ab && for f in *.txt; do echo "== $f"; grep -E " ms " $f | sed -E 's/ +/ /g' | cut -c1-160; done
