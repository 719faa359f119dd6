#!/bin/bash
# One short device call (~150 s), carry [".dev"] (release binary of main at 468b475's kernels): the state pass's
# value-block width at the single-sequence presets, where BV=32 on 4 warps is the default (384 blocks at H96) and
# the pass reads W, Qbar and Kbar once per value block from L2 (ncu 09:50 UTC: 3.08 GB of L2 traffic in 0.61 ms).
# BV=64 on 8 warps with SLOAD=auto takes the TMA clusters of two; BV=128 on 16 warps reads each once.
# Every row checked against f64 by `k3k bench`; each kernel timed alone too (K3K_BENCH_STEPS=1).
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o1100}; mkdir -p $OUT; L=$OUT/log.txt; B=.dev/bin/k3k; W=/tmp/w1100; mkdir -p $W
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $L
S="K128 safe lbsigab gbf16 l2 bsig h0"
C="TSPLIT=0;TSPLIT=0,BV=64,W2=8,STAGES=2;TSPLIT=0,BV=64,W2=8,STAGES=2,SLOAD=cp;TSPLIT=0,BV=128,W2=16,STAGES=2;TSPLIT=0,BV=128,W2=16,STAGES=3"
K3K_BENCH_STEPS=1 timeout 150 $B bench --op kda --window-ms 60 --preset "B1 T8192 H96 $S;B1 T8192 H64 $S;B1 T8192 H96 K128 safe" \
  --knobs "$C" --out $W/b1 > $OUT/b1.txt 2>&1; log "b1 rc=$?"
grep -E ' ms rel|step |FAIL|rror' $OUT/b1.txt | sed -E 's/ +/ /g; s/\[ARENA[^]]*\]//; s/k3k_kda_//' | cut -c1-150
tail -3 $L
