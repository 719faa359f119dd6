#!/bin/bash
# Device call, carry [".dev/bin", ".dev/peers"]: .dev/bin/k3k = release build with kda's new defaults (IWU=wide,
# SLOAD=auto -> tmau at BV=64). Issue 42's report on whichever GPU comes (FLA=0: FlashKDA is the peer; the old
# presets too), then the summary. Outputs: kda.tgz (the report folder), log.txt, summary.md.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/o11}; mkdir -p $OUT
K=/tmp/kdarep; rm -rf $K; mkdir -p $K
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tee $OUT/log.txt
OUT=$K SEED=1 NCU=0 SWEEP=0 OLD=${OLD:-1} FLA=0 BUDGET_S=${BUDGET_S:-440} bash scripts/gpu_kda_flashkda.sh > $K/stdout.txt 2>&1
echo "report rc=$?" | tee -a $OUT/log.txt
tar czf $OUT/kda.tgz -C $K . 2>/dev/null; cp $K/summary.md $OUT/ 2>/dev/null
cat $K/log.txt | tail -20; cat $K/summary.md 2>/dev/null | head -14
