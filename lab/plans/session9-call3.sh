#!/usr/bin/env bash
# Session 9, device call 3: tune kda.decode (never tuned before; its earlier timings were host-bound) and hist B4096,
# then bench every operator but the MX family at the defaults + the tuned records of results/, each followed by
# its peers in the same call (FLA starts from the Triton cache compiled in call 2: .carry/triton.tgz).
# Run: BUDGET_S=560 bash lab/plans/session9-call3.sh  (carry [".carry", ".whl"], timeout_s 590)
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w9b; rm -rf $W; mkdir -p $W "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-560} ))
left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$W/triton
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
tar xzf .carry/triton.tgz -C $W
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> $L 2>&1
pack() { tar czf $OUT/bench.tgz -C $W b 2>/dev/null; tar czf $OUT/results.tgz results/nvidia-h200 2>/dev/null; }
op() { local name=$1 bt=$2 pt=$3; local dir=$W/b/$name
  [ "$(left)" -lt 25 ] && { echo "no time for $name" >> $L; return; }
  [ $bt -gt $(left) ] && bt=$(left)
  timeout $bt $K bench --op $name --out $dir >> $OUT/bench.txt 2>&1; echo "bench $name rc=$? $(date -u +%T)" >> $L
  pack; local slug; slug=$(ls $dir 2>/dev/null | head -1); [ -z "$slug" ] && return
  [ "$(left)" -lt 15 ] && { echo "no time for peers of $name" >> $L; return; }
  [ $pt -gt $(left) ] && pt=$(left)
  timeout $pt python3 scripts/peers.py $dir/$slug --out $dir/peers.json >> $OUT/peers.txt 2>&1; echo "peers $name rc=$? $(date -u +%T)" >> $L
  [ -f $dir/peers.json ] && $K bench --merge-peers $dir/peers.json --out $dir >> $OUT/peers.txt 2>&1
  pack; }
timeout 40 $K bench --op latent_moe_gemm --preset "G28 mean256 K3584 N6144" --results /nonexistent --out $W/warm > /dev/null 2>&1
echo "warm-up done $(date -u +%T)" >> $L
timeout 90 $K tune --op kda.decode --preset k3 --budget 60s > $OUT/tune.txt 2>&1; echo "tune kda.decode rc=$? $(date -u +%T)" >> $L
timeout 60 $K tune --op hist_quantile.qb --preset "T65536 E896 k16 B4096" --budget 35s >> $OUT/tune.txt 2>&1; echo "tune hist rc=$? $(date -u +%T)" >> $L
pack
op kda.decode 40 60
op hist_quantile.qb 60 60
op gated_mla.decode 30 30
op gated_mla.gate 20 20
op latent_moe_gemm 50 30
op kda 70 90
op gated_mla.prefill 50 40
op hist_quantile.column 30 10
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-240
grep -E "^[a-z_.0-9]+ +[A-Za-z0-9]" $OUT/tune.txt | cut -c1-160
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-7
