#!/bin/bash
# The tuned records of results/ as k3k-build reads them, one candidate at a time: results folders where every entry
# of mxfp4_matmul.json has one candidate (the i-th timed and checked, as written, or with the knobs added since 2026-12-01 stripped:
# PATH FIN PF MINB GR L2PF COPY XA SK TS DQ), then `k3k emit --emit ir --tuned` of every preset on both GPUs' folders.
# Records go through k3k-build's lookup (`k3k_build::lookup::resolve`), which fills the knobs a record lacks from
# today's default record (`knobs_from_record`), so the stripped ones run at the defaults, not at their legacy
# meanings (those only reach the operator through the API: tests, `Instance::plan`).
# usage: records.sh BIN DIR; run with the binary before and after, then `diff -r` the two DIRs.
set -u
B=$1; D=$2; mkdir -p $D
root=$(cd "$(dirname "$0")/../../.." && pwd)
export K3K_NVRTC=$root/.tools/cuda/nvidia/cu13/lib/libnvrtc.so.13 K3K_PTXAS=$root/.tools/cuda/nvidia/cu13/bin/ptxas
python3 - "$root" "$D" <<'PY'
import json, os, sys, copy
root, out = sys.argv[1], sys.argv[2]
strip = ["PATH", "FIN", "PF", "MINB", "GR", "L2PF", "COPY", "XA", "SK", "TS", "DQ"]
for gpu in ["nvidia-h200", "nvidia-h100-80gb-hbm3"]:
    d = json.load(open(f"{root}/results/{gpu}/mxfp4_matmul.json"))
    # (k3k-build takes a winner timed with a passed check only.)
    ok = lambda c: c["outcome"].get("status") == "timed" and (c.get("check") or {}).get("passed")
    for e in d["entries"]:
        e["candidates"] = [c for c in e["candidates"] if ok(c)]
    most = max(len(e["candidates"]) for e in d["entries"])
    for variant in ["asis", "strip"]:
        for i in range(most):
            f = copy.deepcopy(d)
            keep = []
            for e in f["entries"]:
                if i >= len(e["candidates"]):
                    continue
                c = e["candidates"][i]
                if variant == "strip":
                    for k in strip:
                        c["knobs"].pop(k, None)
                    c["id"] = ",".join(f"{k}={v}" for k, v in sorted(c["knobs"].items()))
                e["candidates"], e["winner"], e["winner_check"] = [c], c["id"], c["check"]
                keep.append(e)
            f["entries"] = keep
            os.makedirs(f"{out}/res/{variant}{i:03d}/{gpu}", exist_ok=True)
            json.dump(f, open(f"{out}/res/{variant}{i:03d}/{gpu}/mxfp4_matmul.json", "w"))
PY
$B list --op mxfp4_matmul --json | python3 -c 'import json,sys; [print(p["name"]) for p in json.load(sys.stdin)[0]["presets"]]' > $D/presets
mkdir -p $D/emit
for r in $D/res/*; do
  for gpu in $(ls $r); do
    while read -r preset; do
      f=$D/emit/$(basename $r)_${gpu}_$(echo "$preset" | tr -c 'A-Za-z0-9\n' '_')
      $B emit --op mxfp4_matmul --emit ir --tuned --gpu $gpu --results $r --preset "$preset" > $f.txt 2>$f.err
      echo "rc $?" >> $f.err
    done < $D/presets
  done
done
# The emits name the results folder: make them comparable across runs.
sed -i "s#$D/res/#RES/#g" $D/emit/*
echo finished > $D/finished
