#!/bin/bash
# Device call (<= 580 s), carry [".dev"] (.dev/bin/k3k, .dev/bin/k3k-model: stripped release builds of this checkout).
# (1) The k3k-model example: every op against the f64 reference, the captured decode step, and the split MXFP8
#     projection with plain and PDL launches, eager and as a CUDA graph (issue 45: PDL under graph capture).
# (2) PDL against plain launches on the M sweep (defaults otherwise), two runs in swapped order.
# (3) On an H200 with >= 150 s left: issue 45's rows of this GPU (M sweep, M4096, decode, MXFP8 activations) with
#     cuBLAS bf16, torch._scaled_mm and torch._grouped_mm in the same run, into the committed reports.
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o1600}; mkdir -p $OUT; L=$OUT/log.txt; B=.dev/bin/k3k
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(git rev-parse --short HEAD 2>/dev/null)"
# (1)
timeout 200 .dev/bin/k3k-model > $OUT/model.log 2>&1; log "k3k-model rc=$?"
# (2)
P=""; for m in 8 16 32 64 128 256; do P="$P${P:+;}MXFP4 linear M$m N6144 K3584 mxfp8-act"; done
timeout 60 $B bench --op mxfp4_matmul --window-ms 80 --preset "$P" --knobs "SPLIT=0;SPLIT=0,PDL=true" --out /tmp/pdl-a > $OUT/pdl-bench-a.txt 2>&1; log "pdl bench a rc=$?"
timeout 60 $B bench --op mxfp4_matmul --window-ms 80 --preset "$P" --knobs "SPLIT=0,PDL=true;SPLIT=0" --out /tmp/pdl-b > $OUT/pdl-bench-b.txt 2>&1; log "pdl bench b rc=$?"
python3 - /tmp/pdl-a /tmp/pdl-b > $OUT/pdl-table.txt 2>&1 <<'PY'
import glob, json, sys
print("| preset | run | plain ms | PDL ms | plain/PDL |")
print("|---|---|---|---|---|")
for run in sys.argv[1:]:
    for f in glob.glob(run + "/*/mxfp4_matmul.json"):
        for r in json.load(open(f))["rows"]:
            t = {("PDL" if v[0].get("PDL") in (True, "true") else "plain"): v[1] for v in r.get("variants", [])}
            if len(t) == 2:
                print(f"| {r['preset']} | {run[-1]} | {t['plain']:.4f} | {t['PDL']:.4f} | {t['plain']/t['PDL']:.3f}x |")
PY
# (3)
LEFT=$(( ${BUDGET_S:-560} - ($(date +%s) - T0) ))
if echo "$GPU" | grep -q H200 && [ $LEFT -ge 150 ]; then
  W=/tmp/mx-rep; rm -rf $W; mkdir -p $W; cp -r results/bench/. $W/; rm -rf $W/cpu
  P=""; for m in 8 16 32 64 128 256 4096; do P="$P${P:+;}MXFP4 linear M$m N6144 K3584 mxfp8-act"; done
  P="$P;MXFP4 decode 28 experts x 4 tokens N6144 K3584 mxfp8-act;MXFP4 prefill 28 experts mean1024 N6144 K3584"
  timeout $(( LEFT - 70 )) $B bench --op mxfp4_matmul --window-ms 100 --preset "$P" --out $W > $OUT/mx-bench.txt 2>&1
  log "mx bench rc=$?"
  SLUG=$(cd $W && ls -td */ | head -1 | tr -d /)
  timeout 60 python3 scripts/peers.py $W/$SLUG --ops mxfp4_matmul --out $W/peers-mx.json > $OUT/mx-peers.txt 2>&1
  log "mx peers rc=$?"
  $B bench --merge-peers $W/peers-mx.json --out $W >> $OUT/mx-peers.txt 2>&1; log "merge rc=$?"
  tar czf $OUT/mx.tgz -C $W $SLUG/mxfp4_matmul.json $SLUG/mxfp4_matmul.md peers-mx.json 2>/dev/null
  grep -E "linear M[0-9]+ .*mxfp8|28 experts" $W/$SLUG/mxfp4_matmul.md | grep -v kept | cut -d'|' -f2-8 > $OUT/mx-table.txt
fi
cat $L; grep -E "FAIL|fail|graph|PDL|same bits|chains" $OUT/model.log | head -20; tail -4 $OUT/model.log
cat $OUT/pdl-table.txt; cat $OUT/mx-table.txt 2>/dev/null
