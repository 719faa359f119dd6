#!/usr/bin/env bash
# RAN as session 28's calls 3, 4, 6 and 9, each on an H100 (stopped at once).
# Session 28, call 3 (issue 4): the H200 plan, and on the H200 the SM-limit sweep of call 2 as well. Call 2 found
# on an H100 that the tile-major decode keeps its time at 92 of 132 SMs (MPS, 70%), i.e. at the per-SM rate the
# H200's target needs, and reaches 1.22x the read floor only at 66 SMs. On an H200 the same sweep says whether its
# SMs are the bound there: if 70% costs it nothing either, its 1.2x gap is on the memory side. Then the size sweep
# of call 8 (lib.sh size_sweep): fixed costs against the steady rate.
# On an H100 it stops at once (calls 1-2 measured there).
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=540 bash lab/plans/session28-call3.sh  (carry [".carry"], timeout_s 580, kind nvidia-h200)
W=/tmp/w28c3; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
S32="BN=32,BK=128,MINB=6"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  echo "an H100: calls 1-2 measured there, the budget is kept" >> $L; cat $L; exit 0
fi
# The H200 plan (its own log.txt, read back below), leaving ~230 s for the sweeps.
mv $L $W/log-head.txt
BUDGET_S=$(( $(left) - 230 )) bash lab/plans/session27-call1.sh > /dev/null 2>&1
cat $W/log-head.txt >> $L; echo "== session27-call1.sh done $(date -u +%T); the SM-limit sweep:" >> $L
mv $OUT/bench.tgz $OUT/bench-h200.tgz
mps_start
for pct in 100 70 50; do [ "$(left)" -gt 25 ] || break
  export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct; echo "== SM limit $pct%" >> $L
  timeout 40 python3 lab/plans/session28-read-328.py >> $L 2>&1 || echo "read rc=$?" >> $L
  timeout 40 $K bench --op mxfp4_matmul --preset "$P28 tiles" --knobs "PATH=auto;$S32" --results /nonexistent \
    --out $W/b/mps$pct > $W/mps$pct.txt 2>&1; echo "bench rc=$? $(date -u +%T)" >> $L
  grep -E "ms rel" $W/mps$pct.txt | cut -c1-120 >> $L
done
mps_stop
# The sizes: fixed costs against the steady rate (session 28, call 8 on an H100).
[ "$(left)" -gt 100 ] && size_sweep
pack
# At most 8 files come back: the smaller ones travel in extra.tgz.
X="check.txt read-floor.json read-pattern.json peers.txt"
(cd $OUT && tar czf extra.tgz $X 2>/dev/null; rm -f $X)
summary
