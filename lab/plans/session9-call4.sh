#!/usr/bin/env bash
# Session 9, device call 4: kda.decode at its new automatic layout (KL=4 VPL=4 DW=2 SW=1): GPU check, bench, FLA in
# the same call; then mxfp4_matmul's main presets at the defaults + the session 9 tuned records, with cuBLAS.
# Run: BUDGET_S=230 bash lab/plans/session9-call4.sh  (carry [".carry", ".whl"], timeout_s 280)
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w9d; rm -rf $W; mkdir -p $W "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-230} ))
left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$W/triton
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
tar xzf .carry/triton.tgz -C $W
L=$OUT/log.txt; echo "start $(date -u +%T)" > $L
pack() { tar czf $OUT/bench.tgz -C $W b 2>/dev/null; }
op() { local name=$1 bt=$2 pt=$3 pre=$4; local dir=$W/b/$name
  [ "$(left)" -lt 20 ] && { echo "no time for $name" >> $L; return; }
  [ $bt -gt $(left) ] && bt=$(left)
  timeout $bt $K bench --op $name ${pre:+--preset "$pre"} --out $dir >> $OUT/bench.txt 2>&1; echo "bench $name rc=$? $(date -u +%T)" >> $L
  pack; local slug; slug=$(ls $dir 2>/dev/null | head -1); [ -z "$slug" ] && return
  [ "$(left)" -lt 10 ] && { echo "no time for peers of $name" >> $L; return; }
  [ $pt -gt $(left) ] && pt=$(left)
  timeout $pt python3 scripts/peers.py $dir/$slug --out $dir/peers.json >> $OUT/peers.txt 2>&1; echo "peers $name rc=$? $(date -u +%T)" >> $L
  [ -f $dir/peers.json ] && $K bench --merge-peers $dir/peers.json --out $dir >> $OUT/peers.txt 2>&1
  pack; }
timeout 60 $K check --backend cuda --op kda.decode --cases 24 > $OUT/check.txt 2>&1; echo "check kda.decode rc=$? $(date -u +%T)" >> $L
grep -E "^kda.decode|fail" $OUT/check.txt | head -5 >> $L
op kda.decode 30 45 ""
op mxfp4_matmul 110 40 "MXFP4 linear M1 N6144 K3584;MXFP4 linear M16 N6144 K3584;MXFP4 linear M64 N6144 K3584;MXFP4 linear M4096 N6144 K3584;MXFP4 decode 28 experts x 4 tokens N6144 K3584;MXFP4 prefill 28 experts mean1024 N6144 K3584"
echo "end $(date -u +%T)" >> $L
cat $L
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-7
