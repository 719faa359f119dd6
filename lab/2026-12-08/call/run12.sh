#!/bin/bash
# Device call, carry [".dev/bin", ".dev/peers"]: .dev/bin/k3k = release build of main (kda defaults IWU=wide,
# SLOAD=auto).
# On an H200: (1) issue 42's KDA report (scripts/gpu_kda_flashkda.sh SEED=1 OLD=1 NCU=0 SWEEP=0 FLA=0) -> kda.tgz;
#   (2) issue 45's M sweep report (M 8..256 and M4096, MXFP8 activations, cuBLAS bf16 and torch._scaled_mm in the
#   same run) -> mx.tgz.
# On an H100: issue 42's KDA report at the current defaults (OLD=0) -> kda.tgz.
set -u
T0=$(date +%s); BUDGET=${BUDGET_S:-560}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o12}; mkdir -p $OUT; L=$OUT/log.txt; B=.dev/bin/k3k
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(date -u +%FT%TZ)"
K=/tmp/kdarep; rm -rf $K; mkdir -p $K
if echo "$GPU" | grep -q H200; then
  OUT=$K SEED=1 NCU=0 SWEEP=0 OLD=1 FLA=0 BUDGET_S=320 bash scripts/gpu_kda_flashkda.sh > $K/stdout.txt 2>&1
  log "kda report rc=$?"; tail -n 14 $K/summary.md 2>/dev/null
  tar czf $OUT/kda.tgz -C $K . 2>/dev/null
  M=/tmp/mx-rep; rm -rf $M; mkdir -p $M; cp -r results/bench/. $M/; rm -rf $M/cpu
  P=""; for m in 8 16 32 64 128 256 4096; do P="$P${P:+;}MXFP4 linear M$m N6144 K3584 mxfp8-act"; done
  timeout $(( $(left) > 130 ? 110 : $(left) - 20 )) $B bench --op mxfp4_matmul --window-ms 100 --preset "$P" --out $M > $M/mx-bench.txt 2>&1
  log "mx bench rc=$?"
  SLUG=$(cd $M && ls -td */ | head -1 | tr -d /)
  timeout $(( $(left) > 110 ? 90 : $(left) - 15 )) python3 scripts/peers.py $M/$SLUG --ops mxfp4_matmul --out $M/peers-mx.json > $M/mx-peers.txt 2>&1
  log "mx peers rc=$?"
  $B bench --merge-peers $M/peers-mx.json --out $M >> $M/mx-peers.txt 2>&1; log "merge rc=$?"
  tar czf $OUT/mx.tgz -C $M $SLUG/mxfp4_matmul.json $SLUG/mxfp4_matmul.md peers-mx.json mx-bench.txt mx-peers.txt 2>/dev/null
  grep -E "linear M[0-9]+ .*mxfp8" $M/$SLUG/mxfp4_matmul.md | grep -v kept | cut -d'|' -f2-8 | tee -a $L
else
  OUT=$K SEED=1 NCU=0 SWEEP=0 OLD=0 FLA=0 BUDGET_S=$(( $(left) - 20 )) bash scripts/gpu_kda_flashkda.sh > $K/stdout.txt 2>&1
  log "kda report rc=$?"
  tar czf $OUT/kda.tgz -C $K . 2>/dev/null
fi
tail -n 25 $K/log.txt
cat $K/summary.md 2>/dev/null | head -16
cat $L
