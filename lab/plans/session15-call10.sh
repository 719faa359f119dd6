#!/usr/bin/env bash
# Session 15, device call 10: what the MLA prefill's warps wait for (ncu stall reasons, first launch, clocks left
# alone) at T8192 H96, with turns (the default) and without, for the next step on the prefill: the turn barriers,
# the wgmma waits, or the K/V ring (mbarrier waits).
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=150 bash lab/plans/session15-call10.sh  (carry [".carry"], timeout_s 170)
W=/tmp/w15j; source lab/plans/lib.sh
mkdir -p $W/prof
prof() { # name knobs
  timeout 50 ncu --clock-control none --kernel-name "regex:k3k_mla_prefill" --launch-count 1 \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" $K bench --op gated_mla.prefill \
    --preset "causal T8192 H96 d192/128" --knobs "$2" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb > $W/prof/$1.txt 2>&1
  echo "ncu $1 rc=$? $(date -u +%T)" >> $L
}
prof pingpong "PINGPONG=true"
prof no-turns "PINGPONG=false"
tar czf $OUT/prof.tgz -C $W prof
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
for f in $W/prof/*.txt; do echo "== $f"; grep -E "stalled" $f | awk '{print $1, $NF}' | sort -k2 -n -r | head -12; done
