#!/usr/bin/env bash
# Not needed: the full session20-call2.sh ran in session 21 (call 1).
# Session 20 call 2, short form (the device was scarce): the decode's new automatic knobs from 64 rows checked on the
# GPU, timed beside their neighbours, published with the torch peer in the same call, fuzzed. No tune.
# Run: BUDGET_S=300 bash lab/plans/session20-call2b.sh  (carry [".carry"], timeout_s 330)
W=/tmp/w20c2b; source lab/plans/lib.sh
N="MMA=wgmma,WN=1,SWN=0,QK_ACCS=1,BT_PREFETCH=0,BM=64,WM=4,BN=64,STAGES=2,DVS=1,VWG=2,SCORES=shared,LOAD=tma"
timeout 60 $K check --backend cuda --op gated_mla.decode --cases 16 > $OUT/check.txt 2>&1; echo "check decode rc=$? $(date -u +%T)" >> $L
grep -E "cases, [0-9]+ failed" $OUT/check.txt | sort | uniq -c >> $L
V="$N,QK_UNROLL=1,SOFTMAX=fast;$N,QK_UNROLL=1,SOFTMAX=exact;$N,QK_UNROLL=1,SOFTMAX=fast,BT_PREFETCH=1;MMA=wgmma,WN=1,SWN=0,QK_ACCS=1,BT_PREFETCH=0,BM=64,WM=4,BN=64,STAGES=2,DVS=1,VWG=2,SCORES=replicated,QK_UNROLL=0,SOFTMAX=fast"
timeout 100 $K bench --op gated_mla.decode --preset "b128 S4096 H96" --knobs "$V" --results /nonexistent --out $W/ab >> $OUT/bench.txt 2>&1; echo "ab rc=$? $(date -u +%T)" >> $L; tar czf $OUT/ab.tgz -C $W ab
op gated_mla.decode 60 50
[ "$(left)" -gt 30 ] && { timeout $(( $(left) - 8 )) $K fuzz --backend cuda --op gated_mla.decode --time $(( $(left) - 20 ))s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L; tail -2 $OUT/fuzz.txt >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
variants $W/ab SCORES SOFTMAX QK_UNROLL LOAD BT_PREFETCH
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-8
