#!/bin/bash
# One device call (< 10 minutes), carry [".dev/bin/k3k", ".dev/peers", ".dev/whl"]; the binary is main ce10b61.
# (1) issue 42: kda at the defaults (FULLC=1, GSIG=fast, L2R=unrolled) on the six FlashKDA presets and the five
#     earlier ones, FlashKDA and FLA (Triton) in the same run, into the committed reports (SEED=1):
#     scripts/gpu_kda_flashkda.sh with NCU=0 SWEEP=0 OLD=1.
# (2) on an H200 only (the H100 rows were measured at 03:00 UTC with these kernels): issue 45's MXFP8 M sweep and
#     M4096 at the defaults with cuBLAS bf16 and torch._scaled_mm (scripts/peers.py), into the committed report.
# (3) issue 42: CHUNK=16 (FlashKDA's chunk, accepted since ce10b61) against the defaults at B1 T8192 H96, B4 T4096 H64
#     and varlen 8x1024 H96, each kernel timed alone too (K3K_BENCH_STEPS=1); not merged into the reports.
# $OUT: kda.tgz, kda-summary.md, mx.tgz, c16.txt, log.txt
set -u
T0=$(date +%s)
L=$OUT/log.txt
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "start $(date -u +%T) on $GPU" > $L
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT_KDA=/tmp/o-kda; OUT_MX=/tmp/o-mx; rm -rf $OUT_KDA $OUT_MX; mkdir -p $OUT_KDA $OUT_MX
OUT=$OUT_KDA SEED=1 NCU=0 SWEEP=0 OLD=1 BUDGET_S=${KDA_S:-330} bash scripts/gpu_kda_flashkda.sh > $OUT_KDA/stdout.txt 2>&1
echo "kda rc=$? at +$(( $(date +%s) - T0 ))s" >> $L
tar czf $OUT/kda.tgz -C $OUT_KDA . ; cp $OUT_KDA/summary.md $OUT/kda-summary.md 2>/dev/null
if echo "$GPU" | grep -q H200; then
  W=$OUT_MX; mkdir -p $W/bench; cp -r results/bench/. $W/bench/; rm -rf $W/bench/cpu
  MXP=""; for m in 8 16 32 64 128 256 4096; do MXP="$MXP${MXP:+;}MXFP4 linear M$m N6144 K3584 mxfp8-act"; done
  timeout 100 .dev/bin/k3k bench --op mxfp4_matmul --preset "$MXP" --window-ms 100 --out $W/bench > $W/bench.txt 2>&1
  echo "mx bench rc=$? at +$(( $(date +%s) - T0 ))s" >> $L
  SLUG=$(cd $W/bench && ls -t */mxfp4_matmul.json | head -1 | cut -d/ -f1)
  timeout 120 python3 scripts/peers.py $W/bench/$SLUG --ops mxfp4_matmul --out $W/peers.json > $W/peers.txt 2>&1
  echo "mx peers rc=$? at +$(( $(date +%s) - T0 ))s" >> $L
  .dev/bin/k3k bench --merge-peers $W/peers.json --out $W/bench >> $W/bench.txt 2>&1
  tar czf $OUT/mx.tgz -C $W . ; grep -E 'ms rel|M[0-9]+ N6144' $W/bench.txt | tail -12 >> $L
fi
S="K128 safe lbsigab gbf16 l2 bsig h0"
K3K_BENCH_STEPS=1 timeout ${C16_S:-150} .dev/bin/k3k bench --op kda --window-ms 100 --out /tmp/o-c16 \
  --preset "B1 T8192 H96 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S" \
  --knobs "TSPLIT=0;CHUNK=16;CHUNK=16,W1=4;CHUNK=16,BV=64,W2=8;CHUNK=16,STAGES=2" > $OUT/c16.txt 2>&1
echo "c16 rc=$? at +$(( $(date +%s) - T0 ))s" >> $L
grep -E ' ms rel|step k3k' $OUT/c16.txt | sed -E 's/ +/ /g' | cut -c1-150 | tail -45
cat $L; cat $OUT/kda-summary.md 2>/dev/null | tail -40
