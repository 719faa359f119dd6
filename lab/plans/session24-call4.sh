#!/usr/bin/env bash
# Session 24, device call 4 (issue 4; run inline on the warm H200 right after call 3, recorded here as it ran):
# the tile-major 28 x 4 decode around the tune's winner (L2PF 128/256, BK 128/256, MINB 3/4, WA=8, BN 32/128).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=/tmp/c4; P="MXFP4 decode 28 experts x 4 tokens N6144 K3584 tiles"; mkdir -p $OUT; timeout 75 .carry/k3k bench --op mxfp4_matmul --preset "$P" --results /nonexistent --out /tmp/x4 --knobs "BN=64,BK=128,L2PF=128,MINB=4;BN=64,BK=128,L2PF=256,MINB=4;BN=64,BK=256,L2PF=128,MINB=4;BN=64,BK=128,L2PF=128,MINB=3;BN=64,BK=128,L2PF=128,MINB=4,WA=8;BN=32,BK=128,L2PF=128,MINB=5;BN=128,BK=128,L2PF=128,MINB=2" > $OUT/b.txt 2>&1; echo rc=$?; grep -E "ms rel" $OUT/b.txt | cut -c1-230
