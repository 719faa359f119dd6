#!/usr/bin/env bash
# Session 10, device call 2: codegen v8 (folded 32-bit shared addresses below 384 threads, row-hoisted global tile
# moves, kda state pass carrying the next chunk's length) against the v7 binary of main e619983, same machine, same
# call, defaults only (--results /nonexistent: the tuned records are keyed by codegen version). First the GPU
# primitive tests and `k3k check --backend cuda` of every operator with the new binary.
# Run: bash lab/plans/session10-call2.sh (carry [".carry"], timeout_s 590)
set -uo pipefail
NEW=.carry/k3k; OLD=.carry/k3k-old; OUT=${OUT:-./gpu-out}; W=/tmp/w10b; rm -rf $W; mkdir -p $W "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-540} )); left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
L=$OUT/log.txt; echo "start $(date -u +%T)" > $L
K3K_GPU=1 timeout 90 .carry/gpu_primitives > $OUT/primitives.txt 2>&1; echo "primitives rc=$? $(date -u +%T)" >> $L
grep -E "test result|FAIL|fail" $OUT/primitives.txt | head -5 >> $L
timeout 150 $NEW check --backend cuda --op all --cases 3 > $OUT/check.txt 2>&1; echo "check all rc=$? $(date -u +%T)" >> $L
grep -iE "fail|error" $OUT/check.txt | head -5 >> $L
ab() { # op presets
  for v in old new; do
    [ "$(left)" -lt 25 ] && { echo "no time for $1 $v" >> $L; return; }
    local bin=$NEW; [ $v = old ] && bin=$OLD
    timeout $(( $(left) < 90 ? $(left) : 90 )) $bin bench --op $1 --preset "$2" --results /nonexistent --out $W/$v >> $OUT/bench-$v.txt 2>&1
    echo "bench $1 $v rc=$? $(date -u +%T)" >> $L
  done
  tar czf $OUT/bench.tgz -C $W old new 2>/dev/null
}
ab kda "B1 T8192 H96 K128 safe;B1 T65536 H32 K128 safe;B1 T16384 H32 K128 safe"
ab gated_mla.prefill "causal T8192 H96 d192/128"
ab latent_moe_gemm "G28 mean1024 K3584 N6144;G28 mean1024 K3072 N3584"
ab mxfp4_matmul "MXFP4 linear M1 N6144 K3584;MXFP4 linear M64 N6144 K3584;MXFP4 decode 28 experts x 4 tokens N6144 K3584;MXFP4 linear M4096 N6144 K3584"
ab gated_mla.decode "b128 S4096 H96"
ab kda.decode "N64 H96 K128 decode"
echo "end $(date -u +%T)" >> $L
cat $L
for v in old new; do echo "== $v"; grep -h "^| " $W/$v/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2,3,11; done
