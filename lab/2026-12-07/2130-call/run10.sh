#!/bin/bash
# Device call, carry [".dev/bin", ".dev/peers", ".dev/whl"]: .dev/bin/k3k = release build of this checkout (kda knobs
# IWU=wide and SLOAD=tmau added, defaults unchanged).
# (1) kda A/B at FlashKDA's options, interleaved D W U WU D W U WU, each kernel also timed alone (K3K_BENCH_STEPS=1):
#     D = defaults, W = IWU=wide (W and U by 16-byte stores), U = SLOAD=tmau (the state pass's U by TMA; the BV=64
#     presets only), WU = both. Every row is checked against f64 by k3k bench.
# (2) On an H200 with the time left: issue 42's report at the current defaults (FLA=0) -> kda.tgz.
set -u
T0=$(date +%s); BUDGET=${BUDGET_S:-575}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas K3K_CACHE_DIR=/tmp/k3k-cache
OUT=${OUT:-/tmp/o10}; mkdir -p $OUT/ab; L=$OUT/log.txt; B=.dev/bin/k3k
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(date -u +%FT%TZ)"
S="K128 safe lbsigab gbf16 l2 bsig h0"
P64="B4 T4096 H64 $S;varlen 8x1024 H96 $S;varlen [1300,547,2048,963,271,3063] H96 $S"
P32="B1 T8192 H96 $S;B1 T65536 H32 $S;B1 T8192 H64 $S"
declare -A KN=([D]="SLOAD=auto" [W]="IWU=wide" [U]="SLOAD=tmau" [WU]="IWU=wide,SLOAD=tmau")
RESERVE=0; echo "$GPU" | grep -q H200 && RESERVE=230
for round in 1 2; do
  for s in D W U WU; do
    [ $(( $(left) - RESERVE )) -lt 45 ] && { log "$s r$round: skipped ($(left)s left)"; continue; }
    P="$P64"; { [ $s = D ] || [ $s = W ]; } && P="$P64;$P32"
    K3K_BENCH_STEPS=1 timeout $(( $(left) - RESERVE - 5 )) $B bench --op kda --window-ms 100 --knobs "${KN[$s]}" --preset "$P" \
      --out /tmp/ab-$s > $OUT/ab/$s-r$round.txt 2>&1
    log "$s r$round rc=$?"
  done
done
tar czf $OUT/ab.tgz -C $OUT ab 2>/dev/null
if echo "$GPU" | grep -q H200 && [ $(left) -ge 190 ] && [ -d .dev/peers ]; then
  K=/tmp/kdarep; rm -rf $K; mkdir -p $K
  OUT=$K SEED=1 NCU=0 SWEEP=0 OLD=1 FLA=0 BUDGET_S=$(( $(left) - 10 )) bash scripts/gpu_kda_flashkda.sh > $K/stdout.txt 2>&1
  log "kda report rc=$?"; cat $K/summary.md 2>/dev/null | head -12
  tar czf $OUT/kda.tgz -C $K . 2>/dev/null
fi
cd $OUT/ab && for f in *.txt; do echo "== $f"; grep -E "^[A-Za-z].* ms .*(ok|FAIL)|step|intra|state" $f | sed -E 's/ +/ /g' | cut -c1-140; done
