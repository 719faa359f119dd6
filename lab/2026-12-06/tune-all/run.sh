#!/usr/bin/env bash
# Issue 46: `k3k tune --op all` on one GPU, every benchmark preset within the budget (round 1 over every preset,
# round 2 with what is left; see tuner/src/search.rs). Runs the carried stripped binary .dev/bin/k3k.
#   bash lab/2026-12-06/tune-all/run.sh [BUDGET_S]      (default 450; the device allows 600 s per call, so keep
#                                                      BUDGET_S + ~60 s of start-up, overrun and copying under it)
# Writes to $OUT (6 files): TUNE.md, tune.txt (stdout: the table), tune-err.txt.gz (per-job progress lines with
# lane seconds), phases.jsonl.gz (the worker's wall ms per phase of every request, K3K_TUNE_PHASES), records.tgz
# (results/<gpu-slug>/ after the run: the JSON records), log.txt (with a summary of where the time went).
# Prints a short table last.
set -uo pipefail
T0=$(date +%s)
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
BUDGET=${1:-450}
W=/tmp/tune-all; rm -rf "$W"; mkdir -p "$W"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
export K3K_CACHE_DIR=$W/cache K3K_TUNE_PHASES=$W/phases.jsonl
BIN=${K3K_BIN:-$PWD/.dev/bin/k3k}   # K3K_BIN: another binary (a dry run)
L=$OUT/log.txt; log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a "$L"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit --format=csv >> "$L" 2>&1
log "cores $(nproc), budget ${BUDGET}s, $($BIN --version)"
# A copy of the checkout's results: other GPUs' records seed round 1; this GPU's own records (if any) too.
cp -r results "$W/results"
# --timeout-s 30: a hung candidate costs 30 s, not the default 120 (the longest legitimate request, a first
# measurement of kda T65536 with its inputs made, takes well under 15 s on the H200).
timeout $((BUDGET + 90)) "$BIN" tune --op all --budget "${BUDGET}s" --timeout-s 30 --results "$W/results" \
  --peers results/bench > "$W/tune.txt" 2> "$W/tune-err.txt"
rc=$?
log "tune rc=$rc"
SLUG=$(sed -n 's|^results in .*/\([^/ ]*\) ([0-9]* s)$|\1|p' "$W/tune.txt" | tail -1)
[ -n "$SLUG" ] || SLUG=$(ls -td "$W"/results/*/ | head -1 | xargs basename)
log "gpu slug $SLUG"
cp "$W/tune.txt" "$OUT/tune.txt"
gzip -c "$W/tune-err.txt" > "$OUT/tune-err.txt.gz"
[ -f "$W/results/$SLUG/TUNE.md" ] && cp "$W/results/$SLUG/TUNE.md" "$OUT/TUNE.md"
tar czf "$OUT/records.tgz" -C "$W/results" "$SLUG"
gzip -c "$W/phases.jsonl" > "$OUT/phases.jsonl.gz" 2>/dev/null
# Where the GPU-side time went: the worker's phases summed per task (seconds), and per request (median ms).
python3 - "$W/phases.jsonl" <<'PY' | tee -a "$L"
import json, sys, statistics as st
from collections import defaultdict
tot, per, n = defaultdict(float), defaultdict(list), defaultdict(int)
for line in open(sys.argv[1]):
    r = json.loads(line); t = r["task"]; n[t] += 1
    for k, v in r["ms"].items():
        tot[(t, k)] += v / 1e3; per[(t, k)].append(v)
for t in sorted(n):
    print(f"worker {t}: {n[t]} requests; " + ", ".join(f"{k} {tot[(t, k)]:.1f} s (median {st.median(per[(t, k)]):.0f} ms)" for (tt, k) in sorted(tot) if tt == t))
PY
# Where the time went: lane seconds per round from the progress lines.
grep -c '\[round 1\]: .* timed' "$W/tune-err.txt" | xargs -I{} echo "round-1 jobs finished: {}" | tee -a "$L"
grep -c '\[round 2\]: .* timed' "$W/tune-err.txt" | xargs -I{} echo "round-2 jobs finished: {}" | tee -a "$L"
log "done"
echo "== k3k tune --op all --budget ${BUDGET}s on $SLUG (rc=$rc) =="
awk '/^op  /{p=1} p' "$W/tune.txt" | cut -c1-150 | tail -62
