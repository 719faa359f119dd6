#!/usr/bin/env bash
# Issue 8 on one GPU: tune one operator as two shards (what two jobs of an array would run, here one after the
# other), merge the two results files with `k3k results merge`, and keep all three files plus the logs.
# Usage (on the GPU machine, repo root): scripts/shard_demo.sh OP BUDGET   e.g. hist_quantile.qb 40s
# Writes $OUT/shards.tgz (s0/, s1/, merged/, the tune logs).
set -uo pipefail
BIN=${BIN:-.carry/k3k}; OP=${1:?operator}; BUDGET=${2:-40s}; OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
W=$(mktemp -d)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for i in 0 1; do
  $BIN tune --op "$OP" --preset k3 --budget "$BUDGET" --shard $i/2 --results "$W/s$i" > "$W/shard$i.txt" 2>&1
  echo "shard $i/2 rc=$? $(date -u +%T)"
done
f0=$(find "$W/s0" -name "$OP.json" | head -1); f1=$(find "$W/s1" -name "$OP.json" | head -1)
if [ -n "$f0" ] && [ -n "$f1" ]; then
  slug=$(basename "$(dirname "$f0")")
  mkdir -p "$W/merged/$slug"
  $BIN results merge --out "$W/merged/$slug/$OP.json" "$f0" "$f1" > "$W/merge.txt" 2>&1; echo "merge rc=$?"
  cat "$W/merge.txt"
  python3 - "$f0" "$f1" "$W/merged/$slug/$OP.json" <<'PY'
import json, sys
for f in sys.argv[1:]:
    d = json.load(open(f))
    recs = d.get("records", d.get("entries", []))
    n = sum(len(r.get("candidates", [])) for r in recs) if isinstance(recs, list) else "?"
    print(f.split("/")[-3], "records", len(recs) if isinstance(recs, list) else "?", "candidates", n)
PY
else
  echo "a shard wrote no results file: s0=$f0 s1=$f1"
fi
tail -12 "$W/shard0.txt" "$W/shard1.txt"
tar czf "$OUT/shards.tgz" -C "$W" . 2>/dev/null
true
