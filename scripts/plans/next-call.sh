#!/usr/bin/env bash
# A ready plan for the next session's first device call (written in session 8, not yet run): what session 8 call 1
# could not finish, with the FLA Triton compile moved off the critical path.
#  1. FLA warm-up in the background (peers.py --ops kda,kda.decode on the committed reports: same problems)
#     while the GPU only checks and fuzzes (nothing is timed while it runs); FLA_CACHE_RESULTS=0 keeps its
#     autotune choices (made under contention) off disk: only the compiled kernels are kept, the timed run re-tunes;
#  2. mxfp4_matmul bench at the defaults (+ tuned records) and its cuBLAS peers (session 8 call 1 lost the report
#     to a timeout; the report is now rewritten after every preset);
#  3. kda bench (all presets) with FLA, now warm (session 8 call 1 missed B4 T4096 H64's FLA figure);
#  4. latent_moe_gemm bench + peers (repeat of session 8 for machine-to-machine spread).
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k;
#   cargo test --release -p k3k-codegen --test gpu_primitives --no-run; strip -o .carry/gpu_primitives <that binary>;
#   pip download --no-deps fla-core==0.6.0 flash-linear-attention==0.6.0 -d .whl
# Run: BUDGET_S=540 bash scripts/plans/next-call.sh  (carry [".carry", ".whl"], timeout_s 590)
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/wn; rm -rf $W; mkdir -p $W "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-540} ))
left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$W/triton
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> $L 2>&1
( FLA_CACHE_RESULTS=0 timeout 300 python3 scripts/peers.py results/bench/nvidia-h200 --ops kda,kda.decode --out $W/warm.json > $W/warm.txt 2>&1; echo "fla warm rc=$? $(date -u +%T)" >> $L ) &
WARM=$!
c() { timeout ${T:-60} $K check --backend cuda "$@" > $W/c.txt 2>&1; echo "check rc=$? [$*] $(date -u +%T)" >> $L; grep -E "^[a-z_.]+ +cuda|fail|error|mismatch" $W/c.txt | head -12 >> $L; }
pack() { tar czf $OUT/bench.tgz -C $W b_mx b_kda b_gemm 2>/dev/null; }
op() { local name=$1 dir=$W/$2 bt=$3 pt=$4; shift 4
  [ $bt -gt $(left) ] && bt=$(left)
  timeout $bt $K bench --op $name --out $dir "$@" >> $OUT/bench.txt 2>&1; echo "bench $name rc=$? $(date -u +%T)" >> $L
  pack; local slug; slug=$(ls $dir 2>/dev/null | head -1); [ -z "$slug" ] && return
  [ "$(left)" -lt 20 ] && { echo "no time for peers of $name" >> $L; return; }
  [ $pt -gt $(left) ] && pt=$(left)
  timeout $pt python3 scripts/peers.py $dir/$slug --out $dir/peers.json >> $OUT/peers.txt 2>&1; echo "peers $name rc=$? $(date -u +%T)" >> $L
  [ -f $dir/peers.json ] && $K bench --merge-peers $dir/peers.json --out $dir >> $OUT/peers.txt 2>&1
  pack; }
K3K_GPU=1 timeout 60 .carry/gpu_primitives > $OUT/gpu_primitives.txt 2>&1; echo "gpu_primitives rc=$? $(grep 'test result' $OUT/gpu_primitives.txt) $(date -u +%T)" >> $L
T=120 c --op all --cases 3
timeout 150 $K fuzz --backend cuda --op all --time 12s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L; tail -16 $OUT/fuzz.txt >> $L
wait $WARM
op mxfp4_matmul b_mx 150 60
op kda b_kda 120 120
op latent_moe_gemm b_gemm 75 45
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-240
grep -h "^| " $W/b_*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -c1-200
