#!/bin/bash
# Issue 44, Stmt::Fp4Gemv: is the decode GEMV still needed as its own statement? Times mxfp4_matmul's
# decode-shaped presets on the three weight paths: PATH=gemv (Stmt::Fp4Gemv) against the two compositions of
# generic statements the operator already has, PATH=stream (DequantFp4Stream into a bf16 register tile + mma.sync)
# and PATH=tile (cp.async stages + DequantFp4 from shared + mma.sync), with a few tile shapes and K splits each.
# The tile-major preset (`tiles`) builds only on PATH=gemv and is left out. Every set is checked against the
# reference by `k3k bench`, which keeps each set's time in the JSON (`--knobs` sets separated by `;`).
# Run from the repository root on one H100 or H200 (carry .dev/bin/k3k):
#   bash lab/2026-12-07/i44f/fp4gemv-vs-generic.sh
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
B=${K3K:-.dev/bin/k3k}
O=${OUT:-/tmp/out}
P="MXFP4 decode 28 experts x 4 tokens N6144 K3584;MXFP4 linear M1 N6144 K3584;MXFP4 linear M16 N6144 K3584"
SETS="PATH=gemv;PATH=stream;PATH=stream,PF=on;PATH=stream,BN=32;PATH=stream,SPLIT=2;PATH=tile;PATH=tile,BN=64;PATH=tile,SPLIT=2"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > "$O/gpu.txt" 2>&1
# The incumbent: the defaults and this GPU's tuned record (what `k3k bench` reports by default).
$B bench --op mxfp4_matmul --preset "$P" --out "$O/tuned" > "$O/tuned.log" 2>&1
# The paths side by side (same run, same card).
$B bench --op mxfp4_matmul --preset "$P" --knobs "$SETS" --out "$O/paths" > "$O/paths.log" 2>&1
