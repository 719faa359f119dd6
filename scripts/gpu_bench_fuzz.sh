#!/usr/bin/env bash
# One device call: benchmark operators (each with its own knob sets, see below) and time the peers in the same
# call, then fuzz every operator on the GPU. Everything lands under $OUT after each step, so a call cut short
# still returns what finished. Prints a short table last.
# Usage (on the GPU machine, from the repo root): scripts/gpu_bench_fuzz.sh FUZZ_SECS_PER_OP
# Knob sets per operator come from the environment: KNOBS_<op with . -> _>="a;b" (unset: tuned or default).
set -uo pipefail
BIN=.carry/k3k; FT=${1:-15}
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
W=$(mktemp -d)
export K3K_CACHE_DIR=$W/cache LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
save() { cp $W/log.txt "$OUT/log.txt"; [ -d $W/bench ] && tar czf "$OUT/bench.tgz" -C $W bench 2>/dev/null; true; }
echo "start $(date -u +%FT%TZ)" > $W/log.txt
for op in ${BENCH_OPS:-latent_moe_gemm gated_mla.decode hist_quantile.qb mxfp4_matmul}; do
  v="KNOBS_${op//./_}"; ks=${!v:-}
  if [ -n "$ks" ]; then timeout 120 $BIN bench --op $op --out $W/bench --reps 20 --knobs "$ks" >> $W/log.txt 2>&1
  else timeout 120 $BIN bench --op $op --out $W/bench --reps 20 >> $W/log.txt 2>&1; fi
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
