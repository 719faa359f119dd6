#!/usr/bin/env bash
# One device call: a quick GPU check of every operator, then `k3k tune` of every operator at its benchmark presets
# (one worker per visible GPU) into results/, whose files come back under $OUT as tune.tgz.
# Usage (on the GPU machine, from the repo root): scripts/gpu_tune.sh [BUDGET] [CHECK_CASES] [MAX_CANDIDATES]
set -uo pipefail
BIN=.carry/k3k; BUDGET=${1:-8m}; CASES=${2:-15}; MAXC=${3:-24}
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
W=$(mktemp -d)
export K3K_CACHE_DIR=$W/cache LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/nvidia-smi.txt"
if [ -x .carry/gpu_primitives ]; then
  echo "== gpu_primitives"; K3K_GPU=1 .carry/gpu_primitives > "$OUT/gpu_primitives.txt" 2>&1; echo "rc=$?"
  grep -E "FAILED|test result" "$OUT/gpu_primitives.txt" | tail -5
fi
echo "== check"; timeout 150 $BIN check --op all --cases $CASES --backend cuda --seed 20261130 > "$OUT/check.txt" 2>&1
echo "rc=$?"
echo "== tune (budget $BUDGET)"
$BIN tune --op all --budget $BUDGET --max-candidates $MAXC > "$OUT/tune.txt" 2> "$OUT/tune.err"; echo "rc=$?"
tar czf "$OUT/tune.tgz" results/nvidia-h200 2>/dev/null
echo; echo "==== summary"
tail -13 "$OUT/check.txt"
cat "$OUT/tune.txt"
