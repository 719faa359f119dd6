#!/usr/bin/env bash
# Session 15, device call 9: three consumer warpgroups (BM=192, 64 query rows each) taking turns, against the default
# (two warpgroups and a producer warpgroup): with three, one warpgroup's softmax runs under two others' products.
# BM=192 keeps LOAD=cp_async under LOAD=auto (its TMA kernel also runs, thread 0 producing: PRODUCER=warp does not
# apply at 512 threads). `k3k check --backend cuda` of the points, then a same-run A/B on both presets. Knob sets only.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=240 bash lab/plans/session15-call9.sh  (carry [".carry"], timeout_s 260)
W=/tmp/w15i; source lab/plans/lib.sh
P="BM=128,BN=128,LOAD=auto,MMA=wgmma,OVERLAP=true,QK_UNROLL=true,QORDER=head,SOFTMAX=fast,STAGES=2,WM=8,PRODUCER=warp,PINGPONG=true"
T3="$P,BM=192,WM=12,BN=64,STAGES=3"
for kn in "$T3" "$T3,LOAD=tma"; do
  timeout 40 $K check --backend cuda --op gated_mla.prefill --knobs "$kn" --cases 4 >> $OUT/check.txt 2>&1
  echo "check prefill ${kn#$P,} rc=$? $(date -u +%T)" >> $L
done
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -5 >> $L
V="$P;$T3;$T3,LOAD=tma;$T3,PINGPONG=false;$T3,QORDER=lpt"
timeout 150 $K bench --op gated_mla.prefill --preset "causal T8192 H96 d192/128;causal T32768 H12" \
  --knobs "$V" --results /nonexistent --out $W/b/prefill > $OUT/bench-prefill.txt 2>&1
echo "bench prefill rc=$? $(date -u +%T)" >> $L; pack
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
python3 - $W/b <<'PY'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/*/*/*.json")):
    for r in json.load(open(f)).get("rows", []):
        print(r['preset'][:30])
        for kn, ms in r.get("variants", []):
            print("   ", ",".join(f"{k}={v}" for k, v in kn.items() if k in ("BM","BN","STAGES","LOAD","PINGPONG","QORDER")), ms)
PY
