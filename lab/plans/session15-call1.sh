#!/usr/bin/env bash
# Session 15, device call 1: the MLA prefill's ping-pong schedule (PINGPONG=true: the two consumer warpgroups issue
# their S and P V products in turn, `Stmt::InTurn`, new in this session). `k3k check --backend cuda` of four
# ping-pong points (producer warp at 2 and 3 stages, thread-0 producer, three warpgroups), then a same-run A/B on
# the two presets: the defaults against PINGPONG=true at 2 stages of 128 keys and at 3 stages of 64, and the
# thread-0 producer with and without it; a short GPU fuzz of the prefill (PINGPONG is an axis of its space).
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=400 bash lab/plans/session15-call1.sh  (carry [".carry"], timeout_s 420)
W=/tmp/w15a; source lab/plans/lib.sh
P="BM=128,BN=128,LOAD=auto,MMA=wgmma,OVERLAP=true,QK_UNROLL=true,QORDER=head,SOFTMAX=fast,STAGES=2,WM=8,PRODUCER=warp"
for kn in "$P,PINGPONG=true" "$P,PINGPONG=true,BN=64,STAGES=3" "$P,PINGPONG=true,PRODUCER=thread" \
          "$P,PINGPONG=true,BM=192,WM=12,BN=64,STAGES=3"; do
  timeout 60 $K check --backend cuda --op gated_mla.prefill --knobs "$kn" --cases 4 >> $OUT/check.txt 2>&1
  echo "check prefill ${kn#$P,} rc=$? $(date -u +%T)" >> $L
done
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -5 >> $L
V="$P;$P,PINGPONG=true;$P,PINGPONG=true,BN=64,STAGES=3;$P,PRODUCER=thread;$P,PRODUCER=thread,PINGPONG=true"
timeout 200 $K bench --op gated_mla.prefill --preset "causal T8192 H96 d192/128;causal T32768 H12" \
  --knobs "$V" --results /nonexistent --out $W/b/prefill > $OUT/bench-prefill.txt 2>&1
echo "bench prefill rc=$? $(date -u +%T)" >> $L; pack
[ "$(left)" -gt 40 ] && { timeout 30 $K fuzz --backend cuda --op gated_mla.prefill --time 15s >> $OUT/fuzz.txt 2>&1; echo "fuzz prefill rc=$? $(date -u +%T)" >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
tail -3 $OUT/fuzz.txt 2>/dev/null
python3 - $W/b <<'PY'
import json, glob, sys
keys = ("PINGPONG", "PRODUCER", "BN", "STAGES")
for f in sorted(glob.glob(sys.argv[1] + "/*/*/*.json")):
    if "peers" in f: continue
    for r in json.load(open(f)).get("rows", []):
        vs = " | ".join("%s %.4f" % (",".join(f"{k}={v}" for k, v in kn.items() if k in keys), ms) for kn, ms in r.get("variants", []))
        print(f"{r['preset'][:30]:30} | {vs}")
PY
