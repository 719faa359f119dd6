#!/usr/bin/env bash
# Session 11, device call 2: codegen v9 with kda GSWZ=pairs as the default. (1) The latent GEMM at the defaults,
# v8 binary (main a4b7336) against v9, interleaved, same machine; (2) a fresh tune of every operator at the K3
# presets (every v8 record is stale: the codegen version is part of the key) into a copy of results/; (3) the
# gated MLA benches (its output views moved to 16-byte stores) with their torch peers in the same call; (4) a GPU
# fuzz of every operator.
# Run: BUDGET_S=560 bash lab/plans/session11-call2.sh  (carry [".carry"], timeout_s 590)
set -uo pipefail
NEW=.carry/k3k; OLD=.carry/k3k-old; OUT=${OUT:-./gpu-out}; W=/tmp/w11b; rm -rf $W; mkdir -p $W "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-560} )); left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> $L 2>&1
pack() { tar czf $OUT/bench.tgz -C $W old new mla 2>/dev/null; tar czf $OUT/results.tgz -C $W results 2>/dev/null; }
timeout 30 $NEW bench --op latent_moe_gemm --preset "G28 mean256 K3584 N6144" --results /nonexistent --out $W/warm > /dev/null 2>&1
echo "warm-up done $(date -u +%T)" >> $L
G="G28 mean1024 K3584 N6144;G28 mean1024 K3072 N3584"
for v in old new; do
  bin=$NEW; [ $v = old ] && bin=$OLD
  timeout 45 $bin bench --op latent_moe_gemm --preset "$G" --results /nonexistent --out $W/$v >> $OUT/bench.txt 2>&1
  echo "bench gemm $v rc=$? $(date -u +%T)" >> $L
done
pack
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
timeout $(( $(left) - 170 )) $NEW tune --op all --preset k3 --budget $(( $(left) - 270 ))s --max-candidates 16 --results $W/results > $OUT/tune.txt 2>&1
echo "tune rc=$? $(date -u +%T)" >> $L; pack
if [ "$(left)" -gt 90 ]; then
  timeout 60 $NEW bench --op gated_mla --results $W/results --out $W/mla >> $OUT/bench.txt 2>&1; echo "bench gated_mla rc=$? $(date -u +%T)" >> $L
  slug=$(ls $W/mla 2>/dev/null | head -1)
  if [ -n "$slug" ] && [ "$(left)" -gt 40 ]; then
    timeout 45 python3 scripts/peers.py $W/mla/$slug --out $W/mla/peers.json > $OUT/peers.txt 2>&1; echo "peers rc=$? $(date -u +%T)" >> $L
    [ -f $W/mla/peers.json ] && $NEW bench --merge-peers $W/mla/peers.json --out $W/mla >> $OUT/peers.txt 2>&1
  fi
  pack
fi
if [ "$(left)" -gt 25 ]; then
  timeout $(( $(left) - 8 )) $NEW fuzz --backend cuda --op all --time 2s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L
fi
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
tail -30 $OUT/tune.txt | cut -c1-150
tail -14 $OUT/fuzz.txt 2>/dev/null
for v in old new mla; do echo "== $v"; grep -h "^| " $W/$v/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-7; done
