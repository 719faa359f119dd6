#!/usr/bin/env bash
# Session 25, device call 4 (issue 4; run inline on the warm H100 right after call 3, recorded here as it ran): the
# 28 x 4 tile-major and SiTU-GLU + p presets at 32-row, 128-column-batch CTAs around MINB=6 (call 3's fastest), with
# XA=auto (2) everywhere.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=/tmp/c4; mkdir -p $OUT; P="MXFP4 decode 28 experts x 4 tokens N6144 K3584"; timeout 70 .carry/k3k bench --op mxfp4_matmul --preset "$P tiles" --results /nonexistent --out /tmp/x4a --knobs "PATH=auto;BN=32,BK=128,MINB=6;BN=32,BK=128,MINB=5;BN=32,BK=128,MINB=7;BN=64,BK=128,MINB=3" > $OUT/b1.txt 2>&1; echo rc=$?; timeout 60 .carry/k3k bench --op mxfp4_matmul --preset "$P situ_glu+p" --results /nonexistent --out /tmp/x4b --knobs "PATH=auto;BN=32,BK=128,MINB=6;BN=32,BK=128,MINB=5;BN=64,BK=128,MINB=4" > $OUT/b2.txt 2>&1; echo rc=$?; grep -E "ms rel" $OUT/b1.txt $OUT/b2.txt | sed 's/COPY=auto,CPS=0,DEC=auto,DQ=auto,FIN=auto,GR=0,L2PF=auto,//' | cut -c1-190
