#!/usr/bin/env bash
# Session 8 device call 1 (the only one: ~600 s of device time were left): the defaults set from session 7
# call 3 (kda TSPLIT=0 auto, latent GEMM AHEAD=auto, mxfp4 DQ=auto) validated and benched on the H200 with their
# peers in the same call, one knob set (the defaults) per op. Each op benches into its own folder and its peers
# run right after it (torch peers first, FLA last: no Triton cache travels this time), so a call cut short keeps
# what it finished. Everything lands in $OUT as it comes.
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w8; rm -rf $W; mkdir -p $W "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-400} ))
left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$W/triton
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> $L 2>&1
c() { timeout ${T:-60} $K check --backend cuda "$@" > $W/c.txt 2>&1; echo "check rc=$? [$*] $(date -u +%T)" >> $L; grep -E "^[a-z_.]+ +cuda|fail|error|mismatch" $W/c.txt | head -12 >> $L; }
pack() { tar czf $OUT/bench.tgz -C $W b_gemm b_mx b_kda 2>/dev/null; }
# one op: bench at the defaults, then its peers, then merge
op() { local name=$1 dir=$W/$2 bt=$3 pt=$4; shift 4
  timeout $bt $K bench --op $name --out $dir "$@" >> $OUT/bench.txt 2>&1; echo "bench $name rc=$? $(date -u +%T)" >> $L
  local slug; slug=$(ls $dir | head -1); pack
  [ "$(left)" -lt 20 ] && { echo "no time for peers of $name" >> $L; return; }
  [ $pt -gt $(left) ] && pt=$(left)
  timeout $pt python3 scripts/peers.py $dir/$slug --out $dir/peers.json >> $OUT/peers.txt 2>&1; echo "peers $name rc=$? $(date -u +%T)" >> $L
  [ -f $dir/peers.json ] && $K bench --merge-peers $dir/peers.json --out $dir >> $OUT/peers.txt 2>&1
  pack; }
K3K_GPU=1 timeout 60 .carry/gpu_primitives > $OUT/gpu_primitives.txt 2>&1; echo "gpu_primitives rc=$? $(grep 'test result' $OUT/gpu_primitives.txt) $(date -u +%T)" >> $L
T=120 c --op all --cases 3
op latent_moe_gemm b_gemm 75 60
op mxfp4_matmul b_mx 75 60
op kda b_kda 90 200
[ "$(left)" -gt 40 ] && { timeout $(( $(left) - 10 )) $K fuzz --backend cuda --op all --time 25s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T) $(tail -2 $OUT/fuzz.txt | tr '\n' ' ')" >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-240
grep -h "^| " $W/b_*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -c1-200
