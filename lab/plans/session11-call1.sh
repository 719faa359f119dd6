#!/usr/bin/env bash
# Session 11, device call 1: codegen v9 (16-bit tile stores regrouped into 8/16-byte accesses per lane, views
# widened to vec 8 in kda, the latent GEMM epilogue and gated MLA) against the v8 binary of main a4b7336, same
# machine, same call, defaults only (--results /nonexistent: tuned records are keyed by codegen version).
# FLA's Triton kernels are compiled in the background while the GPU only checks (GPU primitive tests + `k3k check
# --backend cuda --op all`), then old/new benches interleaved per operator, then the peers of the new benches
# (FLA chunk_kda, torch._grouped_mm) in the same call.
# Run: BUDGET_S=575 bash lab/plans/session11-call1.sh  (carry [".carry", ".whl"], timeout_s 600)
set -uo pipefail
NEW=.carry/k3k; OLD=.carry/k3k-old; OUT=${OUT:-./gpu-out}; W=/tmp/w11; rm -rf $W; mkdir -p $W "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-560} )); left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$W/triton
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> $L 2>&1
( FLA_CACHE_RESULTS=0 timeout 230 python3 scripts/peers.py results/bench/nvidia-h200 --ops kda --out $W/warm.json > $W/warm.txt 2>&1
  echo "fla warm rc=$? $(date -u +%T)" >> $L ) &
WARM=$!
K3K_GPU=1 timeout 90 .carry/gpu_primitives > $OUT/primitives.txt 2>&1; echo "primitives rc=$? $(date -u +%T)" >> $L
grep -E "test result|FAILED" $OUT/primitives.txt | head -5 >> $L
timeout 180 $NEW check --backend cuda --op all --cases 2 > $OUT/check.txt 2>&1; echo "check all rc=$? $(date -u +%T)" >> $L
grep -iE "fail|error" $OUT/check.txt | head -8 >> $L
wait $WARM
pack() { tar czf $OUT/bench.tgz -C $W old new gemm 2>/dev/null; }
ab() { # op presets-old presets-new knob-sets-of-new timeout-new timeout-old
  for v in old new; do
    [ "$(left)" -lt 150 ] && { echo "no time for $1 $v" >> $L; return; }
    local bin=$NEW pre=$3 kn=${4:-}; [ $v = old ] && { bin=$OLD; pre=$2; kn=; }
    local tl=$5; [ $v = old ] && tl=$6
    timeout $tl $bin bench --op $1 --preset "$pre" ${kn:+--knobs "$kn"} --results /nonexistent --out $W/$v >> $OUT/bench-$v.txt 2>&1
    echo "bench $1 $v rc=$? $(date -u +%T)" >> $L; pack
  done
}
KDA3="B1 T8192 H96 K128 safe;B1 T65536 H32 K128 safe;B1 T16384 H32 K128 safe"
KD="ARENA=2,BV=0,CHUNK=0,EX2=ftz,LVLDT=f16,ODIAG=1,OPDT=f16,STAGES=0,SYNC=2,TSPLIT=0,W1=0,W2=0,XDIAG=1"
# New: the defaults and the same with the pair-swizzled G~ buffer (GSWZ=pairs), both timed, per preset.
ab kda "$KDA3" "$KDA3;B1 T16384 H32 K128 exact;B4 T4096 H64 K128 safe" "$KD;$KD,GSWZ=pairs" 150 70
peers() { # folder cap-seconds: the peers of its reports, then merged into them
  local slug; slug=$(ls $1 2>/dev/null | head -1); [ -z "$slug" ] && return
  [ "$(left)" -lt 20 ] && { echo "no time for the peers of $1" >> $L; return; }
  local t=$(( $(left) - 5 )); [ $t -gt $2 ] && t=$2
  timeout $t python3 scripts/peers.py $1/$slug --out $1/peers.json >> $OUT/peers.txt 2>&1
  echo "peers $1 rc=$? $(date -u +%T)" >> $L
  [ -f $1/peers.json ] && $NEW bench --merge-peers $1/peers.json --out $1 >> $OUT/peers.txt 2>&1
  pack
}
peers $W/new 170
G="G28 mean256 K3584 N6144;G28 mean1024 K3584 N6144;G28 mean1024 K3072 N3584;G56 mean64 K3584 N6144"
# (The GEMM's old binary is timed in call 2.)
if [ "$(left)" -gt 110 ]; then
  timeout 60 $NEW bench --op latent_moe_gemm --preset "$G" --results /nonexistent --out $W/gemm >> $OUT/bench-new.txt 2>&1
  echo "bench latent_moe_gemm new rc=$? $(date -u +%T)" >> $L; pack
  peers $W/gemm 60
fi
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
for v in old new gemm; do echo "== $v"; grep -h "^| " $W/$v/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-7; done
