#!/bin/bash
# MXFP4 x MXFP8 on FP8 tensor cores (issue 45): k3k's MMA=fp8 path against the current default and the peers,
# every k3k row checked against the f64 reference by `k3k bench`. One device call, run from the repository root
# with the stripped release binary carried in .dev/bin/k3k:
#   bash lab/2026-12-06/mx-fp8/run.sh        (carry: [".dev/bin/k3k"]; results under $OUT)
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=${K3K_NVRTC:-/usr/local/cuda/lib64/libnvrtc.so.13}
export K3K_PTXAS=${K3K_PTXAS:-/usr/local/cuda/bin/ptxas}
OUT=${OUT:-/tmp/mx-fp8-out}
mkdir -p "$OUT"
B=.dev/bin/k3k
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
DIMS=""
for M in 8 16 32 64 128 256 4096; do DIMS="$DIMS${DIMS:+;}M=$M,N=6144,K=3584,act=1"; done
PDIMS=""
for M in 8 16 32 64 128 256 4096; do PDIMS="$PDIMS${PDIMS:+;}M=$M,N=6144,K=3584,act=1,packed=1"; done
# ptxas resources of the FP8 kernels (registers, spills), before any timing.
for kn in "MMA=fp8" "MMA=fp8,BM=64,BN=128"; do
  echo "== $kn" >> "$OUT/resources.txt"
  timeout 60 $B emit --op mxfp4_matmul --emit resources --dims M=4096,N=6144,K=3584,act=1 --knobs "$kn" >> "$OUT/resources.txt" 2>&1
done
tail -n 20 "$OUT/resources.txt"
W=100
# The FP8 path at two tile shapes (the faster that passes its check is reported; both times kept in the JSON).
timeout 200 $B bench --op mxfp4_matmul --dims "$DIMS" --knobs "MMA=fp8;MMA=fp8,BM=64,BN=128" --window-ms $W --out "$OUT/fp8" 2>&1 | tail -n 12
# Today's default on the same natural-layout weights, and on the packed layout (the preset rows' layout).
timeout 120 $B bench --op mxfp4_matmul --dims "$DIMS" --window-ms $W --out "$OUT/default" 2>&1 | tail -n 10
timeout 120 $B bench --op mxfp4_matmul --dims "$PDIMS" --window-ms $W --out "$OUT/default_packed" 2>&1 | tail -n 10
# The 28-expert prefill (grouped: the FP8 path does not cover it yet; today's default only).
timeout 60 $B bench --op mxfp4_matmul --dims "G=28,mean=1024,N=6144,K=3584,act=1,packed=1" --window-ms $W --out "$OUT/grouped" 2>&1 | tail -n 4
# Peers (cuBLAS bf16, torch._scaled_mm FP8 rowwise, torch._grouped_mm bf16) and the table, last.
timeout 120 python3 lab/2026-12-06/mx-fp8/peers.py "$OUT" 2>&1 | tee "$OUT/table.txt"
