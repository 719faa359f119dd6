#!/bin/bash
# One device call (~280 s): (1) issue 42, CHUNK=16 against the defaults, each kernel timed alone
# (K3K_BENCH_STEPS=1), three of the FlashKDA presets with its options; every row checked against f64 by bench.
# (2) issue 45, lab/2026-12-07/mx-fp8-pp/run.sh (F8V=6 turns, GLU+p on the GPU, peers, ncu).
# carry [".dev/bin/k3k"]; $OUT: c16.txt, pp.tgz, pp-table.txt, log.txt
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o0830}; mkdir -p $OUT; L=$OUT/log.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $L
S="K128 safe lbsigab gbf16 l2 bsig h0"
K3K_BENCH_STEPS=1 timeout ${C16_S:-120} .dev/bin/k3k bench --op kda --window-ms 60 --out /tmp/o-c16 \
  --preset "B1 T8192 H96 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S" \
  --knobs "TSPLIT=0;CHUNK=16;CHUNK=16,W1=4;CHUNK=16,BV=64,W2=8" > $OUT/c16.txt 2>&1
echo "c16 rc=$? at +$(( $(date +%s) - T0 ))s" >> $L
tar czf $OUT/c16-report.tgz -C /tmp/o-c16 . 2>/dev/null
O2=/tmp/o0830-pp; mkdir -p $O2
OUT=$O2 timeout ${PP_S:-160} bash lab/2026-12-07/mx-fp8-pp/run.sh > $O2/stdout.txt 2>&1
echo "pp rc=$? at +$(( $(date +%s) - T0 ))s" >> $L
tar czf $OUT/pp.tgz -C $O2 . ; cp $O2/table.txt $OUT/pp-table.txt 2>/dev/null
grep -E ' ms rel|step ' $OUT/c16.txt | sed -E 's/ +/ /g' | cut -c1-150 | tail -40
tail -30 $OUT/pp-table.txt 2>/dev/null; cat $L
