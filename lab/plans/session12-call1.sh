#!/usr/bin/env bash
# Session 12, call 1 (ran 04:42-04:50 UTC on 2026-12-04, files lab/2026-12-04/0947-h200-run/), written in session 11 as next-call.sh to restore the tuned
# records codegen v9 left stale, and re-time what v9 changed but session 11 did not reach.
#  1. `k3k tune` of mxfp4_matmul and gated_mla.gate at the K3 presets: round 1 now times the v8 winners of the same
#     problems right after the defaults (mxfp4 28 x 4 gemv: 0.139 ms at v8 against the v9 record's 0.190; the gate:
#     0.0117 / 0.0190 ms at v8 against 0.0172 / 0.0231 at the v9 defaults);
#  2. the benches of those two operators with the new records, and their peers (cuBLAS, torch) in the same call;
#  3. kda.decode at v9 with FLA fused_recurrent_kda (no Triton cache travels: its compile runs inside the peers step);
#  4. a GPU fuzz of every operator with what time is left.
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k;
#   python3 -m pip download --no-deps fla-core==0.6.0 flash-linear-attention==0.6.0 -d .whl (see ../device README)
# Run: BUDGET_S=560 bash lab/plans/session12-call1.sh  (carry [".carry", ".whl"], timeout_s 590)
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/wn; rm -rf $W; mkdir -p $W "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-560} )); left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$W/triton
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> $L 2>&1
pack() { tar czf $OUT/bench.tgz -C $W b 2>/dev/null; tar czf $OUT/results.tgz -C $W results 2>/dev/null; }
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
timeout 30 $K bench --op latent_moe_gemm --preset "G28 mean256 K3584 N6144" --results /nonexistent --out $W/warm > /dev/null 2>&1
for op in mxfp4_matmul gated_mla.gate; do
  [ "$(left)" -lt 200 ] && break
  timeout 150 $K tune --op $op --preset k3 --budget 110s --max-candidates 24 --results $W/results >> $OUT/tune.txt 2>&1
  echo "tune $op rc=$? $(date -u +%T)" >> $L; pack
done
op() { local name=$1 bt=$2 pt=$3; local dir=$W/b/$name
  [ "$(left)" -lt 40 ] && { echo "no time for $name" >> $L; return; }
  timeout $bt $K bench --op $name --results $W/results --out $dir >> $OUT/bench.txt 2>&1; echo "bench $name rc=$? $(date -u +%T)" >> $L
  pack; local slug; slug=$(ls $dir 2>/dev/null | head -1); [ -z "$slug" ] && return
  [ $pt -gt $(left) ] && pt=$(left)
  timeout $pt python3 scripts/peers.py $dir/$slug --out $dir/peers.json >> $OUT/peers.txt 2>&1; echo "peers $name rc=$? $(date -u +%T)" >> $L
  [ -f $dir/peers.json ] && $K bench --merge-peers $dir/peers.json --out $dir >> $OUT/peers.txt 2>&1
  pack; }
op gated_mla.gate 30 30
op mxfp4_matmul 90 60
op kda.decode 30 150
if [ "$(left)" -gt 30 ]; then
  timeout $(( $(left) - 8 )) $K fuzz --backend cuda --op all --time 2s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L
fi
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "^(mxfp4|gated)" $OUT/tune.txt | cut -c1-150
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-7
