#!/usr/bin/env bash
# Session 15, device call 6: call 4 again after one change to the persistent MLA prefill (PERSIST=true): its ring
# slots and phases by mask and shift instead of signed 64-bit remainders and quotients of the loop-carried stage count
# (call 5's ncu: the persistent kernel issued about 9% more instructions for the same work). Checks, a GPU fuzz with
# PERSIST=true, and the same-run A/B of call 4.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=330 bash lab/plans/session15-call6.sh  (carry [".carry"], timeout_s 350)
W=/tmp/w15f; source lab/plans/lib.sh
for kn in "PERSIST=true" "PERSIST=true,PINGPONG=false,BN=64,STAGES=3"; do
  timeout 60 $K check --backend cuda --op gated_mla.prefill --knobs "$kn" --cases 6 >> $OUT/check.txt 2>&1
  echo "check prefill $kn rc=$? $(date -u +%T)" >> $L
done
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -5 >> $L
timeout 30 $K fuzz --backend cuda --op gated_mla.prefill --knobs PERSIST=true --time 12s > $OUT/fuzz.txt 2>&1; echo "fuzz persist rc=$? $(date -u +%T)" >> $L
V="PINGPONG=true;PINGPONG=true,PERSIST=true;PINGPONG=false,PERSIST=true"
timeout 150 $K bench --op gated_mla.prefill --preset "causal T8192 H96 d192/128;causal T32768 H12" \
  --knobs "$V" --results /nonexistent --out $W/b/prefill > $OUT/bench-prefill.txt 2>&1
echo "bench prefill rc=$? $(date -u +%T)" >> $L; pack
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
tail -2 $OUT/fuzz.txt
python3 - $W/b <<'PY'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/*/*/*.json")):
    for r in json.load(open(f)).get("rows", []):
        print(r['preset'][:30], " | ".join("%s %.4f" % (",".join(f"{k}={v}" for k, v in kn.items() if k in ("PINGPONG","PERSIST")), ms) for kn, ms in r.get("variants", [])))
PY
