#!/usr/bin/env bash
# Session 18, device call 1: next-call.sh of session 17 (the MXFP4 gemv as committed at a383ee8: GPU checks, the bench
# of every mxfp4 preset with cuBLAS in the same call to publish), then the wgmma MLA decode's new knobs at b128 S4096
# H96: `k3k check --backend cuda` of OVERLAP (3- and 4-deep 32-key rings) and SOFTMAX=fast, a same-run A/B of the knob
# sets against the default with the torch decode path in the same call; a GPU fuzz of mxfp4 with what time is left.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=560 bash lab/plans/session18-call1.sh  (carry [".carry"], timeout_s 580)
W=/tmp/w18c1; source lab/plans/lib.sh
C=$OUT/check.txt
ck() { timeout $1 $K check --backend cuda --op mxfp4_matmul "${@:2}" >> $C 2>&1; echo "check ${*:2} rc=$? $(date -u +%T)" | cut -c1-200 >> $L; }
ck 60 --cases 16
ck 30 --dims "G=9,per=4,N=6144,K=1024,packed=1" --cases 2
ck 30 --dims "G=9,per=4,N=6144,K=1024,packed=1,epilogue=1,p=1" --cases 2
ck 30 --dims "G=3,per=4,N=200,K=1056,packed=1" --knobs "PATH=gemv,STAGES=3,BN=32,WA=4" --cases 3
ck 30 --dims "G=3,per=3,N=256,K=1056,packed=0" --knobs "PATH=gemv,STAGES=3,BN=32,WA=4" --cases 3
ck 30 --dims "M=16,N=200,K=2048,packed=1" --cases 3
grep -iE "fail|error|mismatch" $C | grep -v " 0 fail" | head -5 >> $L
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
op mxfp4_matmul 100 70
rm -f $OUT/results.tgz
# The MLA decode A/B (knob sets only; the new knobs default to off).
G="MMA=wgmma,SCORES=replicated,WN=1,SWN=0,QK_ACCS=1,BT_PREFETCH=0,QK_UNROLL=1,BM=64,WM=4,DVS=2"
D="$G,BN=64,STAGES=2"
O3="$G,BN=32,STAGES=3,OVERLAP=true"; O4="$G,BN=32,STAGES=4,OVERLAP=true"
for kn in "$O3" "$O4,SOFTMAX=fast" "$G,BN=32,STAGES=3,SOFTMAX=fast"; do
  timeout 40 $K check --backend cuda --op gated_mla.decode --knobs "$kn" --cases 4 >> $C 2>&1
  echo "check decode ${kn#$G,} rc=$? $(date -u +%T)" >> $L
done
grep -iE "failed|error|mismatch" $C | grep -v " 0 failed" | head -5 >> $L
V="$D;$G,BN=32,STAGES=3;$O3;$O4;$O3,SOFTMAX=fast;$O4,SOFTMAX=fast;$G,BN=32,STAGES=3,SOFTMAX=fast;$D,SOFTMAX=fast"
timeout 110 $K bench --op gated_mla.decode --preset "b128 S4096 H96" --knobs "$V" --results /nonexistent --out $W/b/decode >> $OUT/bench.txt 2>&1
echo "bench decode rc=$? $(date -u +%T)" >> $L; pack
slug=$(ls $W/b/decode 2>/dev/null | head -1)
[ -n "$slug" ] && [ "$(left)" -gt 70 ] && { timeout 60 python3 scripts/peers.py $W/b/decode/$slug --out $W/b/decode/peers.json >> $OUT/peers.txt 2>&1; echo "peers decode rc=$? $(date -u +%T)" >> $L;
  [ -f $W/b/decode/peers.json ] && $K bench --merge-peers $W/b/decode/peers.json --out $W/b/decode >> $OUT/peers.txt 2>&1; pack; }
[ "$(left)" -gt 40 ] && { timeout $(( $(left) - 8 )) $K fuzz --backend cuda --op mxfp4_matmul --time $(( $(left) - 20 ))s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L; tail -2 $OUT/fuzz.txt >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-8
python3 - $W/b/decode <<'PY'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/**/*.json", recursive=True)):
    if "peers" in f: continue
    for r in json.load(open(f)).get("rows", []):
        print(r['preset'][:30], "peer", r.get('peer_ms'))
        for kn, ms in r.get("variants", []):
            print("  %s" % ("%.4f" % ms if ms is not None else "failed"), ",".join(f"{k}={v}" for k, v in kn.items() if k in ("BN","STAGES","OVERLAP","SOFTMAX")))
PY
