#!/usr/bin/env bash
# Session 18, device call 2: the wgmma MLA decode with two value warpgroups per block (VWG=2: both warpgroups compute
# the scores of the block's 64 rows from one shared Q tile and one K/V ring, each multiplies 32 of every 64 value
# columns; DVS=1 holds all 512 columns in one block) at b128 S4096 H96. `k3k check --backend cuda` of the points
# (the column-banded wgmma accumulators run on a GPU for the first time), then a same-run A/B against the default
# with the torch decode path in the same call.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=300 bash lab/plans/session18-call2.sh  (carry [".carry"], timeout_s 320)
W=/tmp/w18c2; source lab/plans/lib.sh
C=$OUT/check.txt
G="MMA=wgmma,SCORES=replicated,WN=1,SWN=0,QK_ACCS=1,BT_PREFETCH=0,QK_UNROLL=1,BM=64,WM=4,BN=64,STAGES=2"
for kn in "$G,DVS=1,VWG=2" "$G,DVS=2,VWG=2" "$G,DVS=1,VWG=2,SOFTMAX=fast" "$G,DVS=2"; do
  timeout 60 $K check --backend cuda --op gated_mla.decode --knobs "$kn" --cases 6 >> $C 2>&1
  echo "check decode ${kn#$G,} rc=$? $(date -u +%T)" >> $L
done
grep -E "cases, [0-9]+ failed" $C | sort | uniq -c >> $L
V="$G,DVS=2;$G,DVS=1,VWG=2;$G,DVS=2,VWG=2;$G,DVS=1,VWG=2,SOFTMAX=fast;$G,DVS=1,VWG=2,BT_PREFETCH=1;$G,DVS=2,SOFTMAX=fast"
timeout 110 $K bench --op gated_mla.decode --preset "b128 S4096 H96" --knobs "$V" --results /nonexistent --out $W/b/decode > $OUT/bench.txt 2>&1
echo "bench decode rc=$? $(date -u +%T)" >> $L; pack
slug=$(ls $W/b/decode 2>/dev/null | head -1)
[ -n "$slug" ] && [ "$(left)" -gt 50 ] && { timeout 45 python3 scripts/peers.py $W/b/decode/$slug --out $W/b/decode/peers.json >> $OUT/peers.txt 2>&1; echo "peers decode rc=$? $(date -u +%T)" >> $L;
  [ -f $W/b/decode/peers.json ] && $K bench --merge-peers $W/b/decode/peers.json --out $W/b/decode >> $OUT/peers.txt 2>&1; pack; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
python3 - $W/b/decode <<'PY'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/**/*.json", recursive=True)):
    if "peers" in f: continue
    for r in json.load(open(f)).get("rows", []):
        print(r['preset'][:30], "k3k", r.get('ms'), "peer", r.get('peer_ms'))
        for kn, ms in r.get("variants", []):
            print("  %s" % ("%.4f" % ms if ms is not None else "failed"), ",".join(f"{k}={v}" for k, v in kn.items() if k in ("DVS","VWG","SOFTMAX","BT_PREFETCH")))
PY
