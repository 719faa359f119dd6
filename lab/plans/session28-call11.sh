#!/usr/bin/env bash
# RAN as session 28's call 11, on an H100 (lab/2026-12-05/1949-h100-run/).
# Session 28, call 11 (issue 4): where in time does the decode lose to the read? Call 8 and 10 put the decode's
# extra fixed cost at ~5-7 us over the read's (F 19-22 us against 14.4), only 1-3 us of it growing with the tile (the
# tail). ncu's PM sampling (`--section PmSampling`) records DRAM and SM activity through one launch; the series of
# the decode (auto) and of session 10's Triton read, side by side, show the ramp, the plateau and the drain.
# On an H200: session28-call3.sh (the H200 plan) with what is left.
# Run: BUDGET_S=150 bash lab/plans/session28-call11.sh  (carry [".carry"], timeout_s 400, kind nvidia-h200)
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  BUDGET_S=330 exec bash lab/plans/session28-call3.sh
fi
W=/tmp/w28c11; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
pm() { local tag=$1 re=$2 skip=$3; shift 3
  timeout 60 ncu --section PmSampling --clock-control none --cache-control all --kernel-name "regex:$re" \
    --launch-skip $skip --launch-count 1 -o $W/$tag "$@" > $W/$tag.log 2>&1; echo "ncu $tag rc=$? $(date -u +%T)" >> $L
  tail -3 $W/$tag.log >> $L
  timeout 30 python3 lab/plans/session28-pm-dump.py $W/$tag.ncu-rep > $OUT/pm-$tag.txt 2>&1
  echo "dump $tag rc=$? lines $(wc -l < $OUT/pm-$tag.txt)" >> $L; }
pm read read_sum 20 python3 lab/plans/session28-read-328.py
pm decode mxfp4_mm 4 $K bench --op mxfp4_matmul --preset "$P28 tiles" --knobs PATH=auto --reps 1 --window-ms 0 \
  --results /nonexistent --out $W/pb
tar czf $OUT/reps.tgz -C $W read.ncu-rep decode.ncu-rep 2>/dev/null
echo "end $(date -u +%T)" >> $L; cat $L; head -c 3000 $OUT/pm-decode.txt
