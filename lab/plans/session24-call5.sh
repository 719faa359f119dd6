#!/usr/bin/env bash
# Session 24, device call 5 (issue 4; run inline on the warm H200 right after call 4, recorded here as it ran):
# L2PF=128 against the default on the other decode presets (GLU + p, M1, M16) before making it automatic.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=/tmp/c5; mkdir -p $OUT; timeout 60 .carry/k3k bench --op mxfp4_matmul --preset "MXFP4 decode 28 experts x 4 tokens N6144 K3584 situ_glu+p;MXFP4 linear M1 N6144 K3584;MXFP4 linear M16 N6144 K3584" --results /nonexistent --out /tmp/x5 --knobs "PATH=auto;L2PF=128" > $OUT/b.txt 2>&1; echo rc=$?; grep -E "ms rel" $OUT/b.txt | cut -c1-200
