#!/usr/bin/env bash
# RAN as session 30 call 2 on an H200 (the H200 plan; lab/2026-12-06/0105-h200-run/; NOTES, session 30). Its H100 probe has not run.
# Session 30, call 2 (issue 4): on an H200 the H200 plan (session28-call3.sh, with the whole budget); on an H100 a
# short probe of the decode's tail (at most ~150 s, so that an H200 call can still follow in this session).
# Call 1 (H100) found that with the tail split (TS=6) every SM stays active, issuing at ~50% of peak, for ~3 us
# after DRAM has stopped: the last pieces' data is on chip and the SMs still work through it. If that work is the
# math (decode, scale, mma) the tail is where NOMATH's 2.5-4% saving comes from. The probe: PM samples of the
# automatic 28 x 4 tile-major kernel and of NOMATH (its loads, ring and loop without the math), and of TS=6 with
# NOMATH; then the three timed in one bench run each. NOMATH's values are wrong on purpose (its checks fail; the
# bench keeps the time).
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=540 bash lab/plans/session30-call2.sh  (carry [".carry"], timeout_s 580, kind nvidia-h200)
W=/tmp/w30c2; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  rm -f $L; BUDGET_S=$(( $(left) - 5 )) exec bash lab/plans/session28-call3.sh
fi
END=$(( $(date +%s) + 150 ))
pm_sample auto "$P28 tiles" "PATH=auto"
K3K_EXPERIMENT=NOMATH pm_sample nomath "$P28 tiles" "PATH=auto"
K3K_EXPERIMENT=NOMATH pm_sample ts6-nomath "$P28 tiles" "TS=6"
xp "" b1 "$P28 tiles" "PATH=auto;TS=6"; xp NOMATH 1 "$P28 tiles" "PATH=auto;TS=6"; xp "" b2 "$P28 tiles" "PATH=auto;TS=6"
cat $W/xp.txt >> $L
tar czf $OUT/reps.tgz -C $W auto.ncu-rep nomath.ncu-rep ts6-nomath.ncu-rep 2>/dev/null
summary
