#!/bin/bash
# Device call (~120 s), carry [".dev"] (.dev/bin/k3k). Issue 45: the M32-M256 MXFP8 rows at wide weight tiles with a
# K split (BN=256, WA=8), where a block's activation bytes no longer outweigh its weight bytes (see
# lab/2026-12-07/notes-6/45.md), against the defaults, with and without PDL; checks on the GPU first.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o5}; mkdir -p $OUT; B=.dev/bin/k3k
W="PATH=tile,MMA=sync,BN=256,WA=8"
for s in 4 8; do for bk in 64 128; do
  timeout 30 $B check --backend cuda --op mxfp4_matmul --seed 45 --cases 2 --dims "M=64,N=6144,K=3584,packed=1,act=1" \
    --knobs "$W,SPLIT=$s,BK=$bk,PDL=true" 2>&1 | tail -1
done; done > $OUT/check.txt
P=""; for m in 32 64 128 256; do P="$P${P:+;}MXFP4 linear M$m N6144 K3584 mxfp8-act"; done
K="SPLIT=0;SPLIT=0,PDL=true;$W,SPLIT=4,BK=128,PDL=true;$W,SPLIT=8,BK=64,PDL=true;$W,SPLIT=8,BK=128,PDL=true;$W,SPLIT=4,BK=64,FIN=kernel,PDL=true"
timeout 90 $B bench --op mxfp4_matmul --window-ms 80 --preset "$P" --knobs "$K" --out /tmp/o5b > $OUT/bench.txt 2>&1
cat $OUT/check.txt; grep -E " ms " $OUT/bench.txt | sed -E 's/ +/ /g' | cut -c1-220
