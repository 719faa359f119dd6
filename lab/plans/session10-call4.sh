#!/usr/bin/env bash
# Session 10, device call 4: codegen v8 + the call-3 records: bench the operators whose kernels changed at the
# defaults + the tuned records of results/, each followed by its peers in the same call (FLA from the Triton cache
# compiled in call 3: .carry/triton.tgz), most important first; a short GPU fuzz of every operator if time is left.
# Run: BUDGET_S=540 bash lab/plans/session10-call4.sh  (carry [".carry", ".whl"], timeout_s 590)
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w10d; rm -rf $W; mkdir -p $W "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-560} ))
left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$W/triton
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
tar xzf .carry/triton.tgz -C $W
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> $L 2>&1
pack() { tar czf $OUT/bench.tgz -C $W b 2>/dev/null; tar czf $OUT/results.tgz results/nvidia-h200 2>/dev/null; }
op() { local name=$1 bt=$2 pt=$3 pre=${4:-}; local dir=$W/b/$name
  [ "$(left)" -lt 25 ] && { echo "no time for $name" >> $L; return; }
  [ $bt -gt $(left) ] && bt=$(left)
  timeout $bt $K bench --op $name ${pre:+--preset "$pre"} --out $dir >> $OUT/bench.txt 2>&1; echo "bench $name rc=$? $(date -u +%T)" >> $L
  pack; local slug; slug=$(ls $dir 2>/dev/null | head -1); [ -z "$slug" ] && return
  [ "$(left)" -lt 15 ] && { echo "no time for peers of $name" >> $L; return; }
  [ $pt -gt $(left) ] && pt=$(left)
  timeout $pt python3 scripts/peers.py $dir/$slug --out $dir/peers.json >> $OUT/peers.txt 2>&1; echo "peers $name rc=$? $(date -u +%T)" >> $L
  [ -f $dir/peers.json ] && $K bench --merge-peers $dir/peers.json --out $dir >> $OUT/peers.txt 2>&1
  pack; }
timeout 30 $K bench --op latent_moe_gemm --preset "G28 mean256 K3584 N6144" --results /nonexistent --out $W/warm > /dev/null 2>&1
echo "warm-up done $(date -u +%T)" >> $L
op kda 75 90
op latent_moe_gemm 50 30
op gated_mla.prefill 40 40
op mxfp4_matmul 90 40 "MXFP4 linear M1 N6144 K3584;MXFP4 linear M16 N6144 K3584;MXFP4 linear M64 N6144 K3584;MXFP4 linear M4096 N6144 K3584;MXFP4 decode 28 experts x 4 tokens N6144 K3584;MXFP4 prefill 28 experts mean1024 N6144 K3584"
op gated_mla.decode 30 30
op kda.decode 30 40
if [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) - 10 )) $K fuzz --backend cuda --time 4s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L
fi
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-240
tail -14 $OUT/fuzz.txt 2>/dev/null
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-7
