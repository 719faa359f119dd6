#!/usr/bin/env bash
# One device call: check, benchmark (with a few knob sets), time the peers, merge, and print a short table last.
# Usage (on the GPU machine, from the repo root): scripts/gpu_session.sh BIN OPS [CASES]
# Writes everything under $OUT (default ./gpu-out): bench reports, logs, peers.json, in one tarball.
set -uo pipefail
BIN=${1:-.carry/k3k}; OPS=${2:-all}; CASES=${3:-200}
OUT=${OUT:-./gpu-out}
W=$(mktemp -d)
export K3K_CACHE_DIR=$W/cache LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee $W/nvidia-smi.txt
$BIN doctor | tee $W/doctor.txt
for op in ${OPS//,/ }; do
  $BIN check --op $op --cases $CASES --backend cuda 2>&1 | tee -a $W/check.txt | tail -5
  ks_var="K3K_KNOBS_${op//./_}"; ks=${!ks_var:-}
  if [ -n "$ks" ]; then $BIN bench --op $op --out $W/bench --knobs "$ks" 2>&1 | tee -a $W/bench.txt
  else $BIN bench --op $op --out $W/bench 2>&1 | tee -a $W/bench.txt; fi
done
slug=$(ls $W/bench | head -1)
python3 scripts/peers.py $W/bench/$slug --out $W/peers.json 2>&1 | tee $W/peers.txt | tail -20
$BIN bench --merge-peers $W/peers.json --out $W/bench
mkdir -p $OUT
tar czf $OUT/session.tgz -C $W bench check.txt bench.txt peers.txt peers.json doctor.txt nvidia-smi.txt 2>/dev/null
cp $W/bench/$slug/*.md $OUT/ 2>/dev/null
echo; echo "==== summary"; grep -h "FAIL\|failed" $W/check.txt | tail -5; cat $W/bench/$slug/*.md
