#!/usr/bin/env bash
# Session 13, device call 4: do the peers' first rows still read slow with the ceilings measured after the rows
# (scripts/peers.py)? Two back-to-back peer runs of gated_mla.gate and mxfp4_matmul on the published reports
# (no k3k timing in this call; ratios need k3k's side from the same call, so this only checks the peers' stability).
# Run: bash lab/plans/session13-call4.sh  (no carry needed, timeout_s 300)
set -uo pipefail
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
for run in a b; do
  timeout 120 python3 scripts/peers.py results/bench/nvidia-h200 --ops gated_mla.gate,mxfp4_matmul --out $OUT/peers-$run.json > $OUT/peers-$run.txt 2>&1
  echo "run $run rc=$? $(date -u +%T)"
done
python3 - $OUT <<'PY'
import json, sys
a, b = (json.load(open(f"{sys.argv[1]}/peers-{r}.json")) for r in "ab")
for ra, rb in zip(a["rows"], b["rows"]):
    print(f"{ra['op'][:14]:14} {ra['preset'][:52]:52} {ra['ms'] or 0:.4f} {rb['ms'] or 0:.4f}")
print("ceilings", a["ceilings"], b["ceilings"])
PY
