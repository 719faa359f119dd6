#!/bin/bash
# One device call (~50 s, <= 90), carry [".dev/bin/k3k"] built from branch i42n (2026-12-07): issue 42's
# intra-kernel instruction diet, round 2, at the FlashKDA presets' options, each knob set checked by the bench:
#   TSPLIT=0                     the defaults (IMAP=ops; the full-chunk midpoint anchor folded to t0 + 8: same results)
#   TSPLIT=0,IMAP=gate           + the gate form in the row layout (the same bits as IMAP=ops)
#   TSPLIT=0,IFOLD=1             + norm factors folded into q/k once, the fast sigmoid's constants per block
#   TSPLIT=0,IMAP=gate,IFOLD=1   both
#   TSPLIT=0,IMAP=gate,IFOLD=2   both, and R = beta Gamma k built by the row pass
# Results under $OUT (bench.txt, the JSON report, log.txt).
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
B=.dev/bin/k3k; L=$OUT/log.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $L
S="K128 safe lbsigab gbf16 l2 bsig h0"
K3K_BENCH_STEPS=1 timeout 88 $B bench --op kda --window-ms 60 \
  --preset "B1 T8192 H96 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S" \
  --knobs "TSPLIT=0;TSPLIT=0,IMAP=gate;TSPLIT=0,IFOLD=1;TSPLIT=0,IMAP=gate,IFOLD=1;TSPLIT=0,IMAP=gate,IFOLD=2" \
  --out $OUT/bench > $OUT/bench.txt 2>&1
rc=$?
echo "[+$(( $(date +%s) - T0 ))s] bench rc=$rc" | tee -a $L
grep -E "step k3k_kda_intra|knobs|ms rel" $OUT/bench.txt | head -80 >> $L
