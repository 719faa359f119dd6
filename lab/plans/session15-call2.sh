#!/usr/bin/env bash
# Session 15, device call 2: the MLA prefill with the new default PINGPONG=true (call 1: 5.6% faster at T8192 H96,
# 5.5% at T32768 H12). `k3k check --backend cuda` of the prefill at the defaults, a re-tune from the committed
# records (round 1 times the new default and the old winners in the same run), the published bench with those
# records and torch SDPA + gate in the same call, a GPU fuzz (the defaults now take turns), and ncu (clocks left
# alone) of the default with and without turns at T8192 H96.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=560 bash lab/plans/session15-call2.sh  (carry [".carry"], timeout_s 590)
W=/tmp/w15b; source lab/plans/lib.sh
mkdir -p $W/results $W/prof && cp -r results/nvidia-h200 $W/results/
timeout 60 $K check --backend cuda --op gated_mla.prefill --cases 6 > $OUT/check.txt 2>&1; echo "check prefill rc=$? $(date -u +%T)" >> $L
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -5 >> $L
timeout 110 $K tune --op gated_mla.prefill --preset k3 --budget 90s --max-candidates 6 --min-candidates 3 --results $W/results > $OUT/tune.txt 2>&1
echo "tune prefill rc=$? $(date -u +%T)" >> $L; pack
op gated_mla.prefill 60 60
timeout 25 $K fuzz --backend cuda --op gated_mla.prefill --time 12s > $OUT/fuzz.txt 2>&1; echo "fuzz prefill rc=$? $(date -u +%T)" >> $L
# Neighbours of the new default the tuner may not reach, same run (explored, not published).
[ "$(left)" -gt 200 ] && { timeout 90 $K bench --op gated_mla.prefill --preset "causal T8192 H96 d192/128" --results /nonexistent \
  --knobs "PINGPONG=true;PINGPONG=true,SMGUARD=true;PINGPONG=true,QORDER=lpt;PINGPONG=true,BN=112" --out $W/b2 > $OUT/bench-ab.txt 2>&1
  echo "bench a/b rc=$? $(date -u +%T)" >> $L; tar czf $OUT/ab.tgz -C $W b2; }
SEC="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis"
prof() { # name knobs
  [ "$(left)" -lt 45 ] && { echo "no time for ncu $1" >> $L; return; }
  local t=$(( $(left) - 10 )); [ $t -gt 80 ] && t=80
  timeout $t ncu --clock-control none --kernel-name "regex:k3k_mla_prefill" --launch-count 1 $SEC $K bench --op gated_mla.prefill \
    --preset "causal T8192 H96 d192/128" --knobs "$2" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb > $W/prof/$1.txt 2>&1
  echo "ncu $1 rc=$? $(date -u +%T)" >> $L; cp $W/prof/$1.txt $OUT/ncu-$1.txt
}
prof pingpong "PINGPONG=true"
prof no-turns "PINGPONG=false"
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "^gated" $OUT/tune.txt | cut -c1-200
tail -2 $OUT/fuzz.txt
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-8
python3 - $W/b2 <<'PY'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/*/*.json")):
    for r in json.load(open(f)).get("rows", []):
        print(r['preset'][:30], " | ".join("%s %.4f" % (",".join(f"{k}={v}" for k, v in kn.items() if k in ("PINGPONG","SMGUARD","QORDER","BN")), ms) for kn, ms in r.get("variants", [])))
PY
for f in $W/prof/*.txt; do echo "== $f"; grep -E "SM Frequency|Compute \(SM\) Throughput|Duration|Issue Slots Busy|No Eligible|Registers Per|Achieved Occupancy|Tensor|Warp Cycles Per Issued" $f | head -12; done
