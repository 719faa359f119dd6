#!/usr/bin/env bash
# A device call sized for little remaining GPU time: correctness on the GPU for the given operators, then one
# benchmark pass each (default or tuned knobs) and the peers, with per-step timeouts. Results are copied under
# $OUT after every step, so a call cut short still returns what finished.
# Usage: scripts/gpu_final.sh BIN "check ops" "bench ops" CASES
set -uo pipefail
BIN=${1:-.carry/k3k}; CHECK=${2:-}; BENCH=${3:-}; CASES=${4:-30}
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
W=$(mktemp -d)
export K3K_CACHE_DIR=$W/cache LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
save() { cp $W/log.txt "$OUT/log.txt"; [ -d $W/bench ] && tar czf "$OUT/bench.tgz" -C $W bench 2>/dev/null; true; }
echo "start $(date -u +%FT%TZ)" > $W/log.txt
for op in $CHECK; do
  timeout ${CHECK_TIMEOUT:-45} $BIN check --op $op --cases $CASES --backend cuda 2>&1 | grep -v "^case" | tail -15 >> $W/log.txt; save
done
for op in $BENCH; do
  timeout ${BENCH_TIMEOUT:-90} $BIN bench --op $op --out $W/bench --reps 20 2>&1 >> $W/log.txt; save
done
slug=$(ls $W/bench 2>/dev/null | head -1)
if [ -n "$slug" ]; then
  timeout ${PEER_TIMEOUT:-120} python3 scripts/peers.py $W/bench/$slug --out $W/peers.json >> $W/log.txt 2>&1
  $BIN bench --merge-peers $W/peers.json --out $W/bench >> $W/log.txt 2>&1
  cp $W/peers.json "$OUT/" 2>/dev/null
fi
save
echo "end $(date -u +%FT%TZ)" >> $W/log.txt; save
grep -E "^(op |[a-z_.]+ +cuda)|FAIL" $W/log.txt | head -40
cat $W/bench/*/*.md 2>/dev/null
