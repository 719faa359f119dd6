#!/bin/bash
# Device call (<= 580 s), carry [".dev"].
# H200: the KDA report with FlashKDA and FLA (issue 42's report) only.
# (1) PDL (issue 45): GPU checks of mxfp4_matmul with PDL=true (random problems and the chained plans), then the
#     M sweep with and without PDL, twice in swapped order (defaults otherwise; not merged into the reports).
# (2) KDA intra round 3 (issue 42): bench of KD_SETS at three FlashKDA presets, each kernel alone, and GPU checks.
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o1440}; mkdir -p $OUT; L=$OUT/log.txt; B=.dev/bin/k3k
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(git rev-parse --short HEAD 2>/dev/null)"
if echo "$GPU" | grep -q H200; then
  OK=/tmp/o-kda; rm -rf $OK; mkdir -p $OK
  OUT=$OK SEED=1 NCU=0 SWEEP=0 OLD=1 BUDGET_S=555 bash scripts/gpu_kda_flashkda.sh > $OK/stdout.txt 2>&1
  log "kda report rc=$?"; tar czf $OUT/kda.tgz -C $OK . ; cp $OK/summary.md $OUT/kda-summary.md 2>/dev/null
  cat $L; head -30 $OUT/kda-summary.md; exit 0
fi
# (1)
{
  timeout 60 $B check --backend cuda --op mxfp4_matmul --knobs "PDL=true" --cases 10 --seed 451 2>&1 | tail -3
  for d in "M=8,N=272,K=1056,act=1,packed=1" "M=20,N=200,K=416,act=1,packed=1" "M=130,N=264,K=512,act=1,packed=1"; do
    for kn in "PDL=true" "PDL=true,SPLIT=2,BK=64,FIN=kernel,MMA=sync" "PDL=true,PATH=gemv,SPLIT=1"; do
      echo "check [$d] [$kn]: $(timeout 30 $B check --backend cuda --op mxfp4_matmul --seed 45 --dims "$d" --knobs "$kn" --cases 2 2>&1 | tail -1)"
    done
  done
} > $OUT/pdl-check.txt 2>&1; log "pdl checks: $(grep -c -iE 'fail|error' $OUT/pdl-check.txt) lines with fail/error"
P=""; for m in 8 16 32 64 128 256; do P="$P${P:+;}MXFP4 linear M$m N6144 K3584 mxfp8-act"; done
timeout 80 $B bench --op mxfp4_matmul --window-ms 150 --preset "$P" --knobs "SPLIT=0;SPLIT=0,PDL=true" --out /tmp/pdl-a > $OUT/pdl-bench-a.txt 2>&1; log "pdl bench a rc=$?"
timeout 80 $B bench --op mxfp4_matmul --window-ms 150 --preset "$P" --knobs "SPLIT=0,PDL=true;SPLIT=0" --out /tmp/pdl-b > $OUT/pdl-bench-b.txt 2>&1; log "pdl bench b rc=$?"
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
if [ -n "${KD_SETS:-}" ]; then
  S="K128 safe lbsigab gbf16 l2 bsig h0"
  K3K_BENCH_STEPS=1 timeout 150 $B bench --op kda --window-ms 60 --out /tmp/o-kd \
    --preset "B1 T8192 H96 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S" --knobs "TSPLIT=0;$KD_SETS" > $OUT/kd.txt 2>&1
  log "kd rc=$?"
  IFS=';' read -ra SETS <<< "$KD_SETS"
  for kn in "${SETS[@]}"; do
    echo "kda check [$kn]: $(timeout 40 $B check --backend cuda --op kda --knobs "$kn" --cases 10 --seed 42 2>&1 | tail -1)" >> $L
  done
fi
cat $L; cat $OUT/pdl-table.txt; grep -iE "fail|error" $OUT/pdl-check.txt | head -5; tail -3 $OUT/pdl-check.txt
grep -E ' ms rel|step ' $OUT/kd.txt 2>/dev/null | sed -E 's/ +/ /g; s/\[ARENA[^]]*\]//' | cut -c1-160 | tail -40
head -14 $OUT/kda-summary.md 2>/dev/null
