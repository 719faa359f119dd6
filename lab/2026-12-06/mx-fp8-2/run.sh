#!/bin/bash
# MMA=fp8 generations (issue 45, lab/2026-12-06/mx-fp8-2.md): F8V=1 (the first kernel), F8V=2 (TMA code tiles,
# activation factors in registers, leaner weight conversion; F8V=0 means 1 until 2 is measured), F8V=3 (2 + the weight
# scales folded into the E4M3 codes; the bench's realistic scales allow it) at two tile shapes, and
# the operator's default path, at M 64 and 4096 (N6144 K3584, MXFP8 activations). Every row is checked against
# the f64 reference by `k3k bench` (a failing row has no time). One device call (< 3 minutes), from the
# repository root with the stripped release binary of branch i45b carried:
#   bash lab/2026-12-06/mx-fp8-2/run.sh      (carry: [".dev/bin/k3k"]; results under $OUT)
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=${K3K_NVRTC:-/usr/local/cuda/lib64/libnvrtc.so.13}
export K3K_PTXAS=${K3K_PTXAS:-/usr/local/cuda/bin/ptxas}
OUT=${OUT:-/tmp/mx-fp8-2-out}
mkdir -p "$OUT"
B=.dev/bin/k3k
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
D="M=4096,N=6144,K=3584,act=1"
for kn in "MMA=fp8,F8V=1" "MMA=fp8,F8V=2" "MMA=fp8,F8V=3" "MMA=fp8,F8V=2,BM=64,BN=128"; do
  echo "$kn: $(timeout 60 $B emit --op mxfp4_matmul --emit resources --dims $D --knobs "$kn" 2>&1)"
done | tee "$OUT/resources.txt"
DIMS="M=64,N=6144,K=3584,act=1;$D"
W=100
timeout 150 $B bench --op mxfp4_matmul --dims "$DIMS" --knobs "MMA=fp8,F8V=1;MMA=fp8,F8V=2;MMA=fp8,F8V=3;MMA=fp8,F8V=2,BM=64,BN=128;MMA=fp8,F8V=3,BM=64,BN=128" \
  --window-ms $W --out "$OUT/fp8" > "$OUT/fp8.txt" 2>&1
timeout 60 $B bench --op mxfp4_matmul --dims "$DIMS" --window-ms $W --out "$OUT/default" > "$OUT/default.txt" 2>&1
tail -n 3 "$OUT/fp8.txt" "$OUT/default.txt"
# Table: one row per (variant, M) from the per-knob-set lines ("  custom DIMS  T ms rel E ok [knobs]").
{
  printf "%-34s %6s %10s %9s %s\n" variant M ms TFLOP/s check
  cat "$OUT/fp8.txt" "$OUT/default.txt" | awk '/^  custom / {
    m = $2; sub(/^M=/, "", m); sub(/,.*/, "", m); ms = $3; ok = $6 " " $7;
    kn = $0; sub(/.*\[/, "", kn); sub(/\].*/, "", kn);
    v = "default"; if (kn ~ /MMA=fp8/) { v = "fp8"; if (match(kn, /F8V=[0-9]+/)) v = v " " substr(kn, RSTART, RLENGTH);
      if (match(kn, /BM=[0-9]+/)) v = v " " substr(kn, RSTART, RLENGTH); if (match(kn, /BN=[0-9]+/)) v = v " " substr(kn, RSTART, RLENGTH) }
    tf = 2 * m * 6144 * 3584 / (ms * 1e-3) / 1e12;
    printf "%-34s %6s %10s %9.1f %s\n", v, m, ms, tf, ok }'
} | tee "$OUT/table.txt"
