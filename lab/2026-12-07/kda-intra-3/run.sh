#!/bin/bash
# One device call (~60 s bench + ~60 s checks), carry [".dev/bin/k3k"] built from branch i42o (2026-12-07): issue
# 42's intra kernel, round 3, at the FlashKDA presets' options. Knob sets (all the same bits as the default):
#   TSPLIT=0                     the defaults
#   TSPLIT=0,ISOLVE=1            forward substitution by 16-byte rows of L, N_ii stored transposed (16-byte stores)
#   TSPLIT=0,IREPL=1             diagonal tiles and [C, C] totals solo: replica warps skip them (0 spill)
#   TSPLIT=0,ISOLVE=1,IREPL=1    both
#   TSPLIT=0,ISOLVE=2,IREPL=1    both, and the off-diagonal products in the diagonal segment (one barrier fewer)
# Then `k3k check --backend cuda` (10 random cases, and a fixed FlashKDA-options varlen batch with a partial chunk)
# for each new set, four checks in parallel after the bench. Results under $OUT: log.txt, bench.txt, the bench
# report (bench/), check.txt.
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
B=.dev/bin/k3k; L=$OUT/log.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $L
S="K128 safe lbsigab gbf16 l2 bsig h0"
K3K_BENCH_STEPS=1 timeout 100 $B bench --op kda --window-ms 60 \
  --preset "B1 T8192 H96 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S" \
  --knobs "TSPLIT=0;TSPLIT=0,ISOLVE=1;TSPLIT=0,IREPL=1;TSPLIT=0,ISOLVE=1,IREPL=1;TSPLIT=0,ISOLVE=2,IREPL=1" \
  --out $OUT/bench > $OUT/bench.txt 2>&1
rc=$?
echo "[+$(( $(date +%s) - T0 ))s] bench rc=$rc" | tee -a $L
grep -E "step k3k_kda_intra|knobs|ms rel" $OUT/bench.txt | head -80 >> $L
FK="N=3,L0=1000,L1=64,L2=37,H=2,HV=4,K=128,V=128,safe=1,gate=3,bias=1,gbf16=1,l2norm=1,bsig=1,h0=1"
i=0
for k in ISOLVE=1 IREPL=1 ISOLVE=1,IREPL=1 ISOLVE=2,IREPL=1; do
  ( timeout 90 $B check --op kda --backend cuda --knobs $k --cases ${CASES:-10} > /tmp/chk$i.txt 2>&1; echo "rc=$?" >> /tmp/chk$i.txt
    timeout 60 $B check --op kda --backend cuda --knobs $k --dims "$FK" --cases 2 >> /tmp/chk$i.txt 2>&1
    echo "rc=$?" >> /tmp/chk$i.txt ) &
  i=$((i + 1))
done
wait
i=0
for k in ISOLVE=1 IREPL=1 ISOLVE=1,IREPL=1 ISOLVE=2,IREPL=1; do
  { echo "=== check --knobs $k"; cat /tmp/chk$i.txt; } >> $OUT/check.txt
  i=$((i + 1))
done
grep -E "===|kda  |failed|rc=" $OUT/check.txt >> $L
echo "[+$(( $(date +%s) - T0 ))s] done" | tee -a $L
