#!/usr/bin/env bash
# Session 15, device call 8: the absorbed MLA decode at 96 heads with one 128-row block (two warpgroups, all 96 heads
# of a request in one m-tile, so each K/V tile is read once per block instead of once per 64-row m-tile) against the
# default (one warpgroup of 64 rows, two m-tiles, DVS=2). `k3k check --backend cuda` of the points, then a same-run
# A/B with the torch decode path measured in the same call. Knob sets only (no code change).
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=240 bash lab/plans/session15-call8.sh  (carry [".carry"], timeout_s 260)
W=/tmp/w15h; source lab/plans/lib.sh
G="MMA=wgmma,SCORES=replicated,WN=1,SWN=0,QK_ACCS=1,BT_PREFETCH=0,QK_UNROLL=1"
D="$G,BM=64,WM=4,BN=64,STAGES=2,DVS=2"
for kn in "$G,BM=128,WM=8,BN=32,STAGES=2,DVS=2" "$G,BM=128,WM=8,BN=32,STAGES=2,DVS=4"; do
  timeout 40 $K check --backend cuda --op gated_mla.decode --knobs "$kn" --cases 4 >> $OUT/check.txt 2>&1
  echo "check decode ${kn#$G,} rc=$? $(date -u +%T)" >> $L
done
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -5 >> $L
V="$D;$G,BM=128,WM=8,BN=32,STAGES=2,DVS=2;$G,BM=128,WM=8,BN=32,STAGES=2,DVS=4;$G,BM=128,WM=8,BN=16,STAGES=2,DVS=2;$G,BM=128,WM=8,BN=32,STAGES=3,DVS=4"
timeout 100 $K bench --op gated_mla.decode --preset "b128 S4096 H96" --knobs "$V" --results /nonexistent --out $W/b/decode > $OUT/bench-decode.txt 2>&1
echo "bench decode rc=$? $(date -u +%T)" >> $L; pack
slug=$(ls $W/b/decode 2>/dev/null | head -1)
[ -n "$slug" ] && { timeout 60 python3 scripts/peers.py $W/b/decode/$slug --out $W/b/decode/peers.json > $OUT/peers.txt 2>&1; echo "peers rc=$? $(date -u +%T)" >> $L;
  [ -f $W/b/decode/peers.json ] && $K bench --merge-peers $W/b/decode/peers.json --out $W/b/decode >> $OUT/peers.txt 2>&1; pack; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
python3 - $W/b <<'PY'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/*/*/*.json")):
    if "peers" in f: continue
    for r in json.load(open(f)).get("rows", []):
        print(r['preset'][:30], "peer", r.get('peer_ms'), " | ".join("%s %.4f" % (",".join(f"{k}={v}" for k, v in kn.items() if k in ("BM","BN","DVS","STAGES")), ms) for kn, ms in r.get("variants", [])))
PY
