#!/usr/bin/env bash
# One device call: validate on the GPU (primitive tests, `k3k check` on every operator), run the GPU fuzz,
# and profile each operator's main kernels with Nsight Compute. Prints a short table last; details under $OUT.
# Usage (on the GPU machine, from the repo root): scripts/gpu_validate.sh [CHECK_CASES] [FUZZ_CASES] [FUZZ_TIME]
set -uo pipefail
BIN=.carry/k3k; CHECK=${1:-30}; FUZZ=${2:-1000}; FTIME=${3:-25s}
OUT=${OUT:-./gpu-out}; mkdir -p $OUT
W=$(mktemp -d)
export K3K_CACHE_DIR=$W/cache LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/nvidia-smi.txt
$BIN doctor > $OUT/doctor.txt 2>&1
echo "== gpu_primitives"; K3K_GPU=1 .carry/gpu_primitives > $OUT/gpu_primitives.txt 2>&1; echo "rc=$?"; tail -3 $OUT/gpu_primitives.txt
echo "== check"; $BIN check --op all --cases $CHECK --backend cuda --seed 20261130 > $OUT/check.txt 2>&1; echo "rc=$?"
echo "== ncu"
prof() { # op preset regex
  timeout 75 ncu --kernel-name "regex:$3" --launch-count 4 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
    $BIN bench --op "$1" --preset "$2" --reps 2 --out $W/pb >> $OUT/ncu.txt 2>&1; echo "$1 / $2 rc=$?"
}
prof latent_moe_gemm "G28 mean256 K3584 N6144" "."
prof mxfp4_matmul "MXFP4 linear M1 N6144 K3584" "."
prof mxfp4_matmul "MXFP4 decode 28 experts x 4 tokens N6144 K3584" "."
prof hist_quantile.qb "T262144 E896 k16 B1024" "."
prof gated_mla.decode "b128 S4096 H12" "."
prof gated_mla.prefill "causal T8192 H96 d192/128" "."
prof kda "B1 T8192 H96 K128 safe" "."
echo "== fuzz"; $BIN fuzz --backend cuda --op all --cases $FUZZ --time $FTIME --seed 20261130 > $OUT/fuzz.txt 2>&1; echo "rc=$?"
echo; echo "==== summary"
grep -E "test result|FAILED|panicked" $OUT/gpu_primitives.txt | tail -3
tail -14 $OUT/check.txt
tail -13 $OUT/fuzz.txt
