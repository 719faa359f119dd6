#!/bin/bash
# The kernel comparison of lab/2026-12-07/typed-knobs-mx.md: `k3k fingerprint` of mxfp4_matmul (sampled space, four
# grouped/epilogue/tile-major problems), `k3k list` (text and JSON), and `k3k emit --emit cuda` of knob records outside
# the sampled space (the FP8 paths, XDQ=tile, wgmma, DEC=expr, GR, MINB, COPY, SK/TS, dq_gemm) on five problems,
# each emit's stdout and stderr kept. Run with the binary before the change and after it, then
# `cmp` / `diff -r` the folders: usage: compare.sh BIN DIR
set -u
B=$1; D=$2; mkdir -p $D/emit
root=$(cd "$(dirname "$0")/../../.." && pwd)
export K3K_NVRTC=$root/.tools/cuda/nvidia/cu13/lib/libnvrtc.so.13 K3K_PTXAS=$root/.tools/cuda/nvidia/cu13/bin/ptxas
$B list --op mxfp4_matmul > $D/list.txt 2>&1
$B list --op mxfp4_matmul --json > $D/list.json 2>&1
$B fingerprint --op mxfp4_matmul --every-point --sample 20000 > $D/fp-space.txt 2>$D/fp-space.err
DIMS="G=4,c0=0,c1=17,c2=0,c3=5,K=96,N=34,epilogue=1,p=1,packed=1;G=3,per=4,K=640,N=64,act=1,packed=1"
DIMS="$DIMS;G=4,per=4,K=512,N=256,tiles=1,epilogue=2,p=1;G=5,mean=40,K=256,N=512,epilogue=2,p=1,wide=1,act=1"
$B fingerprint --op mxfp4_matmul --every-point --sample 20000 --dims "$DIMS" > $D/fp-dims.txt 2>$D/fp-dims.err
PROBLEMS=(
  "M=64,N=512,K=1024,packed=1,act=1"
  "M=4,N=256,K=512,act=1"
  "G=4,per=4,N=256,K=512,packed=1,act=1,epilogue=1,p=1"
  "G=4,per=4,N=256,K=512,tiles=1"
  "M=300,N=256,K=512,packed=1"
)
KNOBS=(
  ""
  MMA=fp8 MMA=fp8,F8V=0 MMA=fp8,F8V=1 MMA=fp8,F8V=2 MMA=fp8,F8V=3 MMA=fp8,F8V=4 MMA=fp8,F8V=5 MMA=fp8,F8V=6
  MMA=fp8,F8V=6,TURN=mma MMA=fp8,F8V=6,TURN=ffma MMA=fp8,F8V=5,CPS=1 MMA=fp8,F8V=4,BN=192 MMA=fp8,F8V=4,BM=64,STAGES=4
  MMA=f8sync MMA=f8sync,MINB=2 MMA=f8sync,MINB=3,BM=64 MMA=f8sync,SPLIT=2,BK=64 MMA=f8sync,PATH=gemv MMA=f8sync,PF=on
  PATH=tile,XDQ=tile PATH=stream,XDQ=tile PATH=tile,XDQ=first PATH=stream PATH=stream,PF=on PATH=tile
  MMA=wgmma MMA=wgmma,BM=128 MMA=wgmma,DEC=expr DEC=expr MMA=sync,DEC=expr PATH=tile,DEC=expr
  PATH=gemv PATH=gemv,GR=2 PATH=gemv,GR=8 GR=2 PATH=gemv,MINB=6 MINB=4 PATH=tile,MINB=6 PATH=gemv,STAGES=3
  PATH=gemv,STAGES=4,COPY=bulk,L2PF=0 PATH=gemv,COPY=bulk PATH=gemv,STAGES=3,L2PF=256 PATH=gemv,STAGES=3,XA=1
  PATH=gemv,CPS=4,SK=1 PATH=gemv,TS=6 PATH=tile,FIN=kernel,SPLIT=4 PATH=tile,SPLIT=4 PATH=gemv,PF=on
  PATH=dq_gemm MMA=sync,PATH=auto BM=128,PATH=auto WA=4,WB=2 CPS=4 RASTER=m,SPLIT=2 PATH=gemv,XDQ=tile
)
i=0
for p in "${PROBLEMS[@]}"; do
  j=0
  for k in "${KNOBS[@]}"; do
    f=$D/emit/p${i}_k$(printf %02d $j)
    echo "dims $p knobs $k" > $f.txt
    $B emit --op mxfp4_matmul --emit cuda --dims "$p" ${k:+--knobs "$k"} >> $f.txt 2>$f.err
    echo "rc $?" >> $f.err
    j=$((j+1))
  done
  i=$((i+1))
done
# The tuned records of both GPUs (older records lack PATH, FIN, PF, MINB, GR, L2PF, ...: their absent meanings).
for gpu in nvidia-h200 nvidia-h100-80gb-hbm3; do
  $B list --op mxfp4_matmul --json | python3 -c 'import json,sys; [print(p["name"]) for p in json.load(sys.stdin)[0]["presets"]]' |
  while read -r preset; do
    f=$D/emit/tuned_${gpu}_$(echo "$preset" | tr -c 'A-Za-z0-9\n' '_')
    $B emit --op mxfp4_matmul --emit cuda --tuned --gpu $gpu --preset "$preset" > $f.txt 2>$f.err
    echo "rc $?" >> $f.err
  done
done
echo done > $D/done
