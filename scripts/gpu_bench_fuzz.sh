#!/usr/bin/env bash
# One device call: (optionally) check operators on the GPU, benchmark operators (each with its own knob sets, see
# below) and time the peers in the same call, then (optionally) tune and fuzz every operator on the GPU.
# Everything lands under $OUT after each step, so a call cut short still returns what finished. Prints a short
# table last.
# Usage (on the GPU machine, from the repo root): scripts/gpu_bench_fuzz.sh FUZZ_SECS_PER_OP (0: no fuzz)
# Environment:
#   CHECK_OPS="op op" CHECK_CASES=N   `k3k check --backend cuda` first (fresh random problems vs the f64 reference)
#   CHECK_SETS="op=knobs;op=knobs"    more checks, each at one knob set (CHECK_CASES cases)
#   PEERS=0                           skip the peer step (run scripts/peers.py in a later call on the reports)
#   PRIMS=0                           skip the GPU primitive tests
# Every step logs its end time (UTC) to log.txt; clocks.csv holds nvidia-smi's SM clock and power each second.
#   WARM=0                            no GPU warm-up before the first measurement
#   WORK=/tmp/dir                     fixed work folder (a second call on the warm machine reuses its reports)
#   BENCH_OPS="op op"                 operators to benchmark (default below; "" for none)
#   KNOBS_<op with . -> _>="a;b"      knob sets per operator (unset: tuned or default)
#   PRESETS_<op>="p1;p2"              presets per operator (unset: all)
#   TUNE="k3k tune arguments"         a `k3k tune` run after the benchmarks (results and TUNE.md under $OUT)
#   FUZZ_ARGS="--tuned"               extra `k3k fuzz` arguments (e.g. fuzz the tuned configs of results/ too)
# Before the benchmarks: the GPU primitive tests and, when carried, the hist_quantile GPU step-time test. FLA (for
# the KDA peer) is installed from carried wheels in .whl/ when present; Triton's kernel cache travels as
# .carry/triton-cache.tgz or as its 15 MiB parts .carry/triton-cache.tgz.part-* (SAVE_TRITON=1 writes the parts to
# $OUT after the peers: one file may bring back at most 16 MiB, and FLA's cache is larger), so FLA compiles its
# kernels once, not every call (~200 s of device time).
set -uo pipefail
BIN=.carry/k3k; FT=${1:-15}
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
W=${WORK:-$(mktemp -d)}; mkdir -p "$W"
# A later call on the same (warm) machine finds the reports in WORK; on a fresh one, in a carried bench.tgz.
[ ! -d "$W/bench" ] && [ -f .carry/bench.tgz ] && tar xzf .carry/bench.tgz -C "$W"
export K3K_CACHE_DIR=$W/cache LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export TRITON_CACHE_DIR=$W/triton
[ -f .carry/triton-cache.tgz ] && mkdir -p $W/triton && tar xzf .carry/triton-cache.tgz -C $W/triton
if ls .carry/triton-cache.tgz.part-* >/dev/null 2>&1; then
  mkdir -p $W/triton && cat .carry/triton-cache.tgz.part-* | tar xzf - -C $W/triton
fi
save() { cp $W/log.txt "$OUT/log.txt"; [ -d $W/bench ] && tar czf "$OUT/bench.tgz" -C $W bench 2>/dev/null; true; }
echo "start $(date -u +%FT%TZ)" > $W/log.txt
# SM clock, power and temperature every second of the call (timestamped), to tell a throttled run from a slow kernel.
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv \
  -l 1 > "$OUT/clocks.csv" 2>/dev/null & SMI=$!
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >> $W/log.txt
# Warm the GPU before the first measurement (WARM=0 skips): memory-bound kernels timed in the first minute of a fresh
# machine ran 20-30% slow (lab/NOTES.md, 2026-12-01). ~3 s of GEMM (4096 repetitions).
if [ "${WARM:-1}" != 0 ]; then
  timeout 90 $BIN bench --op latent_moe_gemm --preset "G28 mean256 K3584 N6144" --knobs "OVERLAP=off" --window-ms 1e5 \
    --out $W/warm > $W/warm.txt 2>&1; echo "warm-up rc=$? $(date -u +%T)" | tee -a $W/log.txt
fi
[ "${PRIMS:-1}" != 0 ] && [ -x .carry/gpu_primitives ] && { K3K_GPU=1 timeout 60 .carry/gpu_primitives > "$OUT/gpu_primitives.txt" 2>&1; echo "gpu_primitives rc=$?" | tee -a $W/log.txt; }
[ "${PRIMS:-1}" != 0 ] && [ -x .carry/hist_quantile_gpu ] && { K3K_GPU=1 timeout 120 .carry/hist_quantile_gpu --nocapture --test-threads 1 > "$OUT/hist_quantile_gpu.txt" 2>&1; echo "hist_quantile_gpu rc=$?" | tee -a $W/log.txt; }
for op in ${CHECK_OPS:-}; do
  timeout ${CHECK_TIMEOUT:-60} $BIN check --op $op --cases ${CHECK_CASES:-30} --backend cuda > $W/check-$op.txt 2>&1
  echo "check $op rc=$? $(date -u +%T)" | tee -a $W/log.txt; grep -v "^case" $W/check-$op.txt | tail -6 >> $W/log.txt; save
done
IFS=';' read -ra sets <<< "${CHECK_SETS:-}"
for cs in "${sets[@]}"; do
  op=${cs%%=*}; ks=${cs#*=}
  timeout ${CHECK_TIMEOUT:-60} $BIN check --op $op --cases ${CHECK_CASES:-30} --backend cuda --knobs "$ks" > $W/check-set.txt 2>&1
  echo "check $op [$ks] rc=$? $(date -u +%T)" | tee -a $W/log.txt; grep -v "^case" $W/check-set.txt | tail -4 >> $W/log.txt; save
done
for op in ${BENCH_OPS-latent_moe_gemm gated_mla.decode hist_quantile.qb mxfp4_matmul}; do
  v="KNOBS_${op//./_}"; ks=${!v:-}; pv="PRESETS_${op//./_}"; ps=${!pv:-}
  args=(--op $op --out $W/bench --reps 20)
  [ -n "$ks" ] && args+=(--knobs "$ks")
  [ -n "$ps" ] && args+=(--preset "$ps")
  timeout ${BENCH_TIMEOUT:-120} $BIN bench "${args[@]}" >> $W/log.txt 2>&1
  echo "bench $op rc=$? $(date -u +%T)" | tee -a $W/log.txt; save
done
slug=$(ls $W/bench 2>/dev/null | head -1)
if [ -n "$slug" ] && [ "${PEERS:-1}" != 0 ]; then
  timeout ${PEER_TIMEOUT:-150} python3 scripts/peers.py $W/bench/$slug --out $W/peers.json >> $W/log.txt 2>&1; echo "peers rc=$?"
  $BIN bench --merge-peers $W/peers.json --out $W/bench >> $W/log.txt 2>&1
  cp $W/peers.json "$OUT/" 2>/dev/null
  if [ -d $W/triton ] && [ "${SAVE_TRITON:-0}" = 1 ]; then
    tar czf - -C $W/triton . 2>/dev/null | split -b 15m - "$OUT/triton-cache.tgz.part-"
  fi
fi
save
if [ -n "${TUNE:-}" ]; then
  echo "== tune $(date -u +%T)"
  # shellcheck disable=SC2086
  $BIN tune $TUNE > "$OUT/tune.txt" 2>&1; echo "tune rc=$? $(date -u +%T)" | tee -a $W/log.txt
  tar czf "$OUT/tune-results.tgz" results 2>/dev/null
fi
if [ "$FT" != 0 ]; then
  echo "== fuzz $(date -u +%T)"
  # shellcheck disable=SC2086
  $BIN fuzz --backend cuda --op all --cases ${FUZZ_CASES:-1000} --time ${FT}s ${FUZZ_ARGS:-} > "$OUT/fuzz.txt" 2> "$OUT/fuzz.err"
  echo "fuzz rc=$? $(date -u +%T)"; tar czf "$OUT/regressions.tgz" proptest-regressions
fi
echo "end $(date -u +%FT%TZ)" >> $W/log.txt; kill $SMI 2>/dev/null; save
echo; echo "==== summary"
grep -h "^check\|FAIL" $W/log.txt | head -20
grep -h "^| " $W/bench/*/*.md 2>/dev/null | grep -v "^| ---" | cut -c1-200
[ -f "$OUT/tune.txt" ] && tail -25 "$OUT/tune.txt"
[ -f "$OUT/fuzz.txt" ] && tail -14 "$OUT/fuzz.txt"
true
