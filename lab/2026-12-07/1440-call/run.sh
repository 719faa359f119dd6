#!/bin/bash
# Device call (<= 580 s), carry [".dev"].
# (1) PDL (issue 45): GPU checks of mxfp4_matmul with PDL=true (random problems and the chained plans), then the
#     M sweep with and without PDL, twice in swapped order (defaults otherwise; not merged into the reports).
# (2) KDA intra round 3 (issue 42): lab/2026-12-07/kda-intra-3/run.sh (bench of its knob sets, GPU checks).
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o1440}; mkdir -p $OUT; L=$OUT/log.txt; B=.dev/bin/k3k
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(git rev-parse --short HEAD 2>/dev/null)"
# (1)
{
  timeout 60 $B check --backend cuda --op mxfp4_matmul --knobs "PDL=true" --cases 6 --seed 451 2>&1 | tail -3
  for d in "M=8,N=272,K=1056,act=1,packed=1" "M=20,N=200,K=416,act=1,packed=1" "M=130,N=264,K=512,act=1,packed=1"; do
    for kn in "PDL=true" "PDL=true,SPLIT=2,BK=64,FIN=kernel,MMA=sync" "PDL=true,PATH=gemv,SPLIT=1"; do
      echo "check [$d] [$kn]: $(timeout 30 $B check --backend cuda --op mxfp4_matmul --seed 45 --dims "$d" --knobs "$kn" --cases 2 2>&1 | tail -1)"
    done
  done
} > $OUT/pdl-check.txt 2>&1; log "pdl checks: $(grep -c -iE 'fail|error' $OUT/pdl-check.txt) lines with fail/error"
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
# (2)
mkdir -p /tmp/i3; CASES=5 OUT=/tmp/i3 timeout 170 bash lab/2026-12-07/kda-intra-3/run.sh > /tmp/i3/stdout.txt 2>&1; log "intra-3 rc=$?"
tar czf $OUT/intra3.tgz -C /tmp/i3 . 2>/dev/null
# (3) On an H200 with >= 150 s left: issue 45's rows of this GPU (the M sweep, M4096, the 28-expert prefill, MXFP8
#     activations) with cuBLAS bf16, torch._scaled_mm and torch._grouped_mm in the same run, into the committed reports.
LEFT=$(( ${BUDGET_S:-300} - ($(date +%s) - T0) ))
if echo "$GPU" | grep -q H200 && [ $LEFT -ge 150 ]; then
  W=/tmp/mx-rep; rm -rf $W; mkdir -p $W; cp -r results/bench/. $W/; rm -rf $W/cpu
  P=""; for m in 8 16 32 64 128 256 4096; do P="$P${P:+;}MXFP4 linear M$m N6144 K3584 mxfp8-act"; done
  timeout $(( LEFT - 70 )) $B bench --op mxfp4_matmul --window-ms 100 --preset "$P" --out $W > $OUT/mx-bench.txt 2>&1
  log "mx bench rc=$?"
  SLUG=$(cd $W && ls -td */ | head -1 | tr -d /)
  timeout 60 python3 scripts/peers.py $W/$SLUG --ops mxfp4_matmul --out $W/peers-mx.json > $OUT/mx-peers.txt 2>&1
  log "mx peers rc=$?"
  $B bench --merge-peers $W/peers-mx.json --out $W >> $OUT/mx-peers.txt 2>&1; log "merge rc=$?"
  tar czf $OUT/mx.tgz -C $W $SLUG/mxfp4_matmul.json $SLUG/mxfp4_matmul.md peers-mx.json 2>/dev/null
  grep -E "linear M[0-9]+ .*mxfp8" $W/$SLUG/mxfp4_matmul.md | grep -v kept | cut -d'|' -f2-8 > $OUT/mx-table.txt
fi
cat $L; cat $OUT/pdl-table.txt; grep -iE "fail|error" $OUT/pdl-check.txt | head -5; tail -3 $OUT/pdl-check.txt
grep -E ' ms rel|step k3k_kda_intra' /tmp/i3/bench.txt 2>/dev/null | sed -E 's/ +/ /g; s/\[ARENA[^]]*\]//' | cut -c1-170 | tail -40
grep -E "===|kda  |failed|rc=" /tmp/i3/check.txt 2>/dev/null
cat $OUT/mx-table.txt 2>/dev/null
