#!/usr/bin/env bash
# Session 9, device call 1: does hoisting the kernel-key hash out of the timed loop (plan.rs step_kernels) change
# what the bench reads for the short kernels? The same binary before (.carry/k3k-old = b438f5a) and after
# (.carry/k3k), interleaved per operator, defaults only (--results /nonexistent: no tuned record), then the peers of
# those operators in the same call.
# Build here: cargo build --release; strip -o .carry/k3k target/release/k3k (and the parent commit into k3k-old);
#   pip download --no-deps fla-core==0.6.0 flash-linear-attention==0.6.0 -d .whl
# Run: BUDGET_S=540 bash lab/plans/session9-call1.sh  (carry [".carry", ".whl"], timeout_s 590)
set -uo pipefail
OUT=${OUT:-./gpu-out}; W=/tmp/w9; rm -rf $W; mkdir -p $W "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-540} ))
left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$W/triton
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> $L 2>&1
pack() { tar czf $OUT/bench.tgz -C $W new old 2>/dev/null; }
ab() { local name=$1 pre=$2
  for b in old new; do
    local bin=.carry/k3k; [ $b = old ] && bin=.carry/k3k-old
    [ "$(left)" -lt 30 ] && { echo "no time for $b $name" >> $L; return; }
    K3K_LOG=k3k_runtime=debug timeout 90 $bin bench --op $name ${pre:+--preset "$pre"} --results /nonexistent --out $W/$b \
      > $W/$b.$name.txt 2>&1; echo "$b $name rc=$? $(date -u +%T)" >> $L
    grep -h "host .* ms per repetition\|host-bound" $W/$b.$name.txt | sort | uniq -c | sort -rn | head -4 >> $L
    cat $W/$b.$name.txt >> $OUT/bench.txt
  done; pack; }
ab kda.decode ""
ab gated_mla.decode ""
ab gated_mla.gate ""
ab hist_quantile.qb "T262144 E896 k16 B1024;T65536 E896 k16 B4096"
ab mxfp4_matmul "MXFP4 linear M1 N6144 K3584;MXFP4 linear M16 N6144 K3584;MXFP4 decode 28 experts x 4 tokens N6144 K3584"
ab mx.quantize ""
ab mx.dequantize ""
# Peers of the new run, same call (kda.decode's FLA compiles its Triton kernels first).
for d in $W/new/*; do
  [ "$(left)" -lt 25 ] && { echo "no time for peers" >> $L; break; }
  timeout $(( $(left) - 10 )) python3 scripts/peers.py $d --out $W/new/peers.json >> $OUT/peers.txt 2>&1; echo "peers rc=$? $(date -u +%T)" >> $L
  [ -f $W/new/peers.json ] && .carry/k3k bench --merge-peers $W/new/peers.json --out $W/new >> $OUT/peers.txt 2>&1
done
pack
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-240
for b in old new; do echo "== $b"; grep -h "^| " $W/$b/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-6; done
