#!/usr/bin/env bash
# One device call: benchmark operators (each with its own knob sets, see below) and time the peers in the same
# call, then fuzz every operator on the GPU. Everything lands under $OUT after each step, so a call cut short
# still returns what finished. Prints a short table last.
# Usage (on the GPU machine, from the repo root): scripts/gpu_bench_fuzz.sh FUZZ_SECS_PER_OP
# Knob sets per operator come from the environment: KNOBS_<op with . -> _>="a;b" (unset: tuned or default),
# presets from PRESETS_<op>="p1;p2" (unset: all). Before the benchmarks: the GPU primitive tests and, when carried,
# the hist_quantile GPU step-time test.
set -uo pipefail
BIN=.carry/k3k; FT=${1:-15}
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
W=$(mktemp -d)
export K3K_CACHE_DIR=$W/cache LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
save() { cp $W/log.txt "$OUT/log.txt"; [ -d $W/bench ] && tar czf "$OUT/bench.tgz" -C $W bench 2>/dev/null; true; }
echo "start $(date -u +%FT%TZ)" > $W/log.txt
nvidia-smi --query-gpu=index,name,driver_version --format=csv >> $W/log.txt
[ -x .carry/gpu_primitives ] && { K3K_GPU=1 timeout 60 .carry/gpu_primitives > "$OUT/gpu_primitives.txt" 2>&1; echo "gpu_primitives rc=$?" | tee -a $W/log.txt; }
[ -x .carry/hist_quantile_gpu ] && { K3K_GPU=1 timeout 120 .carry/hist_quantile_gpu --nocapture --test-threads 1 > "$OUT/hist_quantile_gpu.txt" 2>&1; echo "hist_quantile_gpu rc=$?" | tee -a $W/log.txt; }
save
for op in ${BENCH_OPS:-latent_moe_gemm gated_mla.decode hist_quantile.qb mxfp4_matmul}; do
  v="KNOBS_${op//./_}"; ks=${!v:-}; pv="PRESETS_${op//./_}"; ps=${!pv:-}
  args=(--op $op --out $W/bench --reps 20)
  [ -n "$ks" ] && args+=(--knobs "$ks")
  [ -n "$ps" ] && args+=(--preset "$ps")
  timeout 120 $BIN bench "${args[@]}" >> $W/log.txt 2>&1
  echo "bench $op rc=$? $(date -u +%T)" | tee -a $W/log.txt; save
done
slug=$(ls $W/bench 2>/dev/null | head -1)
if [ -n "$slug" ]; then
  timeout 150 python3 scripts/peers.py $W/bench/$slug --out $W/peers.json >> $W/log.txt 2>&1; echo "peers rc=$?"
  $BIN bench --merge-peers $W/peers.json --out $W/bench >> $W/log.txt 2>&1
  cp $W/peers.json "$OUT/" 2>/dev/null
fi
save
echo "== fuzz $(date -u +%T)"
$BIN fuzz --backend cuda --op all --cases 1000 --time ${FT}s --seed 20261130 > "$OUT/fuzz.txt" 2> "$OUT/fuzz.err"
echo "fuzz rc=$? $(date -u +%T)"; tar czf "$OUT/regressions.tgz" proptest-regressions
echo "end $(date -u +%FT%TZ)" >> $W/log.txt; save
echo; echo "==== summary"
grep -h "^| " $W/bench/*/*.md 2>/dev/null | grep -v "^| ---" | cut -c1-200
tail -12 "$OUT/fuzz.txt"
