#!/usr/bin/env bash
# Session 11, device call 3: kda at the committed defaults of 4d22776 (GSWZ=pairs, W/U as pair stores, qb/kb/P and
# o regrouped into 8/16-byte stores, 0 spills) benched on every preset, then FLA chunk_kda in the same call
# (cold: its Triton compile and autotune run inside the peers step, with nothing else on the GPU).
# Run: BUDGET_S=420 bash lab/plans/session11-call3.sh  (carry [".carry", ".whl"], timeout_s 450)
set -uo pipefail
NEW=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w11c; rm -rf $W; mkdir -p $W "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-420} )); left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$W/triton
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> $L 2>&1
pack() { tar czf $OUT/bench.tgz -C $W kda 2>/dev/null; }
timeout 20 $NEW bench --op latent_moe_gemm --preset "G28 mean256 K3584 N6144" --results /nonexistent --out $W/warm > /dev/null 2>&1
P="B1 T8192 H96 K128 safe;B1 T65536 H32 K128 safe;B1 T16384 H32 K128 safe;B1 T16384 H32 K128 exact;B4 T4096 H64 K128 safe"
timeout 90 $NEW bench --op kda --preset "$P" --results /nonexistent --out $W/kda > $OUT/bench.txt 2>&1
echo "bench kda rc=$? $(date -u +%T)" >> $L; pack
slug=$(ls $W/kda 2>/dev/null | head -1)
if [ -n "$slug" ]; then
  timeout $(( $(left) - 5 )) python3 scripts/peers.py $W/kda/$slug --out $W/kda/peers.json > $OUT/peers.txt 2>&1
  echo "peers rc=$? $(date -u +%T)" >> $L
  [ -f $W/kda/peers.json ] && $NEW bench --merge-peers $W/kda/peers.json --out $W/kda >> $OUT/peers.txt 2>&1
  pack
fi
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -h "^| " $W/kda/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-7
