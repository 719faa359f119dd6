#!/bin/bash
# The short form of run.sh (<= ~190 s), carry [".dev"]: (1) the intra kernel's third round: bench of its knob sets
# at three FlashKDA presets (each kernel alone too) and GPU checks of ISOLVE=1,IREPL=1; (2) PDL: GPU checks and one
# A/B of the M sweep. Everything is written to $OUT as it comes, so a cut call still returns what ran.
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/oshort}; mkdir -p $OUT; L=$OUT/log.txt; B=.dev/bin/k3k
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(git rev-parse --short HEAD 2>/dev/null)"
S="K128 safe lbsigab gbf16 l2 bsig h0"
K3K_BENCH_STEPS=1 timeout 80 $B bench --op kda --window-ms 40 --out /tmp/kb \
  --preset "B1 T8192 H96 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S" \
  --knobs "TSPLIT=0;TSPLIT=0,ISOLVE=1;TSPLIT=0,IREPL=1;TSPLIT=0,ISOLVE=1,IREPL=1" > $OUT/kda-bench.txt 2>&1
log "kda bench rc=$?"
FK="N=3,L0=1000,L1=64,L2=37,H=2,HV=4,K=128,V=128,safe=1,gate=3,bias=1,gbf16=1,l2norm=1,bsig=1,h0=1"
{ timeout 40 $B check --op kda --backend cuda --knobs ISOLVE=1,IREPL=1 --cases 5 --seed 7 2>&1 | tail -2
  timeout 30 $B check --op kda --backend cuda --knobs ISOLVE=1,IREPL=1 --dims "$FK" --cases 2 2>&1 | tail -1
  timeout 30 $B check --backend cuda --op mxfp4_matmul --knobs "PDL=true" --cases 4 --seed 451 2>&1 | tail -2
  for d in "M=8,N=272,K=1056,act=1,packed=1" "M=130,N=264,K=512,act=1,packed=1"; do
    for kn in "PDL=true" "PDL=true,SPLIT=2,BK=64,FIN=kernel,MMA=sync"; do
      echo "[$d] [$kn] $(timeout 20 $B check --backend cuda --op mxfp4_matmul --seed 45 --dims "$d" --knobs "$kn" --cases 1 2>&1 | tail -1)"
    done
  done; } > $OUT/checks.txt 2>&1
log "checks done"
P=""; for m in 8 16 64 128; do P="$P${P:+;}MXFP4 linear M$m N6144 K3584 mxfp8-act"; done
timeout 50 $B bench --op mxfp4_matmul --window-ms 60 --preset "$P" --knobs "SPLIT=0;SPLIT=0,PDL=true" --out /tmp/pa > $OUT/pdl-bench.txt 2>&1
log "pdl bench rc=$?"
tar czf $OUT/reports.tgz -C /tmp kb pa 2>/dev/null
cat $L; grep -E ' ms rel|step k3k_kda_intra' $OUT/kda-bench.txt | sed -E 's/ +/ /g; s/\[ARENA[^]]*\]//' | cut -c1-170
cat $OUT/checks.txt; grep -E "ms rel|knobs|PDL" $OUT/pdl-bench.txt | cut -c1-200 | head -30
