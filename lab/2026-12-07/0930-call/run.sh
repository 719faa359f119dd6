#!/bin/bash
# One device call (<= ~560 s), carry [".dev/bin/k3k", ".dev/peers"]:
# (1) issue 42: the intra kernel's instruction diet (branch i42m) against the defaults, each kernel alone
#     (K3K_BENCH_STEPS=1), KD_SETS knob sets at three FlashKDA presets; every row checked against f64 by bench.
# (2) issue 45: the M sweep presets (M 8..256, MXFP8 activations) at the defaults into the committed report of this
#     GPU (SEED: the committed rows kept), cuBLAS bf16 and torch._scaled_mm in the same run (scripts/peers.py).
# (3) issue 45: f8sync's GLU+p and grouped forms against the f64 reference on the GPU (k3k check --backend cuda).
# (4) on an H200 only, with >= 330 s left: kda with FlashKDA into the committed reports (issue 42's report).
# $OUT: log.txt, kd.txt, mx.tgz, mx-table.txt, kda.tgz, kda-summary.md
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o0930}; mkdir -p $OUT; L=$OUT/log.txt; B=.dev/bin/k3k
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(git rev-parse --short HEAD 2>/dev/null)"
S="K128 safe lbsigab gbf16 l2 bsig h0"
# 1.
K3K_BENCH_STEPS=1 timeout ${KD_S:-130} $B bench --op kda --window-ms 60 --out /tmp/o-kd \
  --preset "B1 T8192 H96 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S" --knobs "${KD_SETS:-TSPLIT=0}" > $OUT/kd.txt 2>&1
log "kd rc=$?"
# 2.
W=/tmp/mx-rep; rm -rf $W; mkdir -p $W; cp -r results/bench/. $W/; rm -rf $W/cpu
P=""; for m in 8 16 32 64 128 256; do P="$P${P:+;}MXFP4 linear M$m N6144 K3584 mxfp8-act"; done
timeout 90 $B bench --op mxfp4_matmul --window-ms 100 --preset "$P" --out $W > $OUT/mx-bench.txt 2>&1; log "mx bench rc=$?"
SLUG=$(cd $W && ls -td */ | head -1 | tr -d /)
timeout 100 python3 scripts/peers.py $W/$SLUG --ops mxfp4_matmul --out $W/peers-mx.json > $OUT/mx-peers.txt 2>&1; log "mx peers rc=$?"
$B bench --merge-peers $W/peers-mx.json --out $W >> $OUT/mx-peers.txt 2>&1; log "merge rc=$?"
tar czf $OUT/mx.tgz -C $W $SLUG/mxfp4_matmul.json $SLUG/mxfp4_matmul.md peers-mx.json 2>/dev/null
grep -E "linear M(8|16|32|64|128|256) " $W/$SLUG/mxfp4_matmul.md | cut -d'|' -f2-8 > $OUT/mx-table.txt
# 3.
for kn in "MMA=f8sync"; do for d in "M=96,N=272,K=1056,act=1,epilogue=1,p=1,packed=1" "G=6,mean=40,N=272,K=352,act=1,epilogue=1,p=1,packed=1" "G=5,mean=30,N=200,K=416,act=1"; do
  echo "check [$d] [$kn]: $(timeout 30 $B check --backend cuda --op mxfp4_matmul --seed 45 --dims "$d" --knobs "$kn" --cases 2 2>&1 | tail -1)" >> $L
done; done; log "f8sync checks"
# 4.
LEFT=$(( ${BUDGET_S:-560} - ($(date +%s) - T0) ))
if echo "$GPU" | grep -q H200 && [ $LEFT -ge 330 ]; then
  OK=/tmp/o-kda; rm -rf $OK; mkdir -p $OK
  OUT=$OK SEED=1 NCU=0 SWEEP=0 FLA=0 OLD=1 BUDGET_S=$(( LEFT - 10 )) bash scripts/gpu_kda_flashkda.sh > $OK/stdout.txt 2>&1
  log "kda report rc=$?"; tar czf $OUT/kda.tgz -C $OK . ; cp $OK/summary.md $OUT/kda-summary.md 2>/dev/null
else log "kda report skipped ($GPU, ${LEFT}s left)"; fi
grep -E ' ms rel|step ' $OUT/kd.txt | sed -E 's/ +/ /g; s/\[ARENA[^]]*\]//' | cut -c1-150 | tail -30
cat $OUT/mx-table.txt; cat $L; head -12 $OUT/kda-summary.md 2>/dev/null
