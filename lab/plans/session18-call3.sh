#!/usr/bin/env bash
# Session 18, device call 3: the new automatic MLA decode knobs from 64 rows (VWG=2, DVS=1, SOFTMAX=fast, the score
# loop rolled): `k3k check --backend cuda` (random cases and the new knobs at 96 heads), the bench of the decode presets
# with the torch decode path in the same call (to publish), the neighbours at b128 S4096 H96 in one run (unrolled,
# exact softmax, 32-key stages, OVERLAP, the old default), then a GPU fuzz of the decode with what time is left.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=330 bash lab/plans/session18-call3.sh  (carry [".carry"], timeout_s 350)
W=/tmp/w18c3; source lab/plans/lib.sh
C=$OUT/check.txt
G="MMA=wgmma,SCORES=replicated,WN=1,SWN=0,QK_ACCS=1,BT_PREFETCH=0,BM=64,WM=4"
N="$G,BN=64,STAGES=2,DVS=1,VWG=2,SOFTMAX=fast,QK_UNROLL=0"
timeout 60 $K check --backend cuda --op gated_mla.decode --cases 12 >> $C 2>&1; echo "check decode random rc=$? $(date -u +%T)" >> $L
timeout 60 $K check --backend cuda --op gated_mla.decode --knobs "$N" --cases 8 >> $C 2>&1; echo "check decode new rc=$? $(date -u +%T)" >> $L
grep -E "cases, [0-9]+ failed" $C | sort | uniq -c >> $L
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
op gated_mla.decode 100 60
rm -f $OUT/results.tgz
V="$N;${N/QK_UNROLL=0/QK_UNROLL=1};${N/SOFTMAX=fast/SOFTMAX=exact};${N/BN=64,STAGES=2/BN=32,STAGES=4};${N/BN=64,STAGES=2/BN=32,STAGES=4},OVERLAP=true;$G,BN=64,STAGES=2,DVS=2,QK_UNROLL=1"
[ "$(left)" -gt 60 ] && { timeout 90 $K bench --op gated_mla.decode --preset "b128 S4096 H96" --knobs "$V" --results /nonexistent --out $W/ab > $OUT/ab.txt 2>&1; echo "ab rc=$? $(date -u +%T)" >> $L; tar czf $OUT/ab.tgz -C $W ab; }
[ "$(left)" -gt 30 ] && { timeout $(( $(left) - 8 )) $K fuzz --backend cuda --op gated_mla.decode --time $(( $(left) - 20 ))s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L; tail -2 $OUT/fuzz.txt >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-8
python3 - $W/ab <<'PY'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/**/*.json", recursive=True)):
    for r in json.load(open(f)).get("rows", []):
        print(r['preset'][:30])
        for kn, ms in r.get("variants", []):
            print("  %s" % ("%.4f" % ms if ms is not None else "failed"), ",".join(f"{k}={v}" for k, v in kn.items() if k in ("BN","STAGES","DVS","VWG","SOFTMAX","QK_UNROLL","OVERLAP")))
PY
