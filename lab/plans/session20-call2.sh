#!/usr/bin/env bash
# Ran in session 21 as call 1 (2026-12-05 04:45 UTC; files lab/2026-12-05/0448-h200-run/).
# Session 20 call 2: the decode's new automatic knobs from 64 rows (SCORES=shared LOAD=tma QK_UNROLL=1, the fastest
# point of call 1: 0.351 ms against 0.451 at H96) checked on the GPU, timed beside their neighbours in one run, then
# session 19's `next-call-2.sh` (now this file): `k3k tune` of the decode (round 2 around the built knobs), the bench of both presets
# with the tuned records and the torch peer in the same call (published), and a GPU fuzz of the tuned configs.
# Build first: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=540 bash lab/plans/session20-call2.sh  (carry [".carry"], timeout_s 570)
W=/tmp/wnext2; source lab/plans/lib.sh
N="MMA=wgmma,WN=1,SWN=0,QK_ACCS=1,BT_PREFETCH=0,BM=64,WM=4,BN=64,STAGES=2,DVS=1,VWG=2,SCORES=shared,LOAD=tma"
timeout 60 $K check --backend cuda --op gated_mla.decode --cases 16 > $OUT/check.txt 2>&1; echo "check decode rc=$? $(date -u +%T)" >> $L
timeout 60 $K check --backend cuda --op gated_mla.decode --knobs "$N,QK_UNROLL=1,SOFTMAX=fast" --cases 12 >> $OUT/check.txt 2>&1; echo "check decode new auto rc=$? $(date -u +%T)" >> $L
grep -E "cases, [0-9]+ failed" $OUT/check.txt | sort | uniq -c >> $L
V="$N,QK_UNROLL=1,SOFTMAX=fast;$N,QK_UNROLL=1,SOFTMAX=exact;$N,QK_UNROLL=1,SOFTMAX=fast,BT_PREFETCH=1;$N,QK_UNROLL=0,SOFTMAX=fast;MMA=wgmma,WN=1,SWN=0,QK_ACCS=1,BT_PREFETCH=0,BM=64,WM=4,BN=64,STAGES=2,DVS=1,VWG=2,SCORES=replicated,QK_UNROLL=0,SOFTMAX=fast"
timeout 120 $K bench --op gated_mla.decode --preset "b128 S4096 H96" --knobs "$V" --results /nonexistent --out $W/ab >> $OUT/bench.txt 2>&1; echo "ab rc=$? $(date -u +%T)" >> $L; tar czf $OUT/ab.tgz -C $W ab
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
timeout 250 $K tune --op gated_mla.decode --budget 220s --max-candidates 60 --results $W/results > $OUT/tune.txt 2>&1
echo "tune rc=$? $(date -u +%T)" >> $L; pack
op gated_mla.decode 60 50
[ "$(left)" -gt 30 ] && { timeout $(( $(left) - 8 )) $K fuzz --backend cuda --op gated_mla.decode --tuned --results $W/results --time $(( $(left) - 20 ))s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L; tail -2 $OUT/fuzz.txt >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
variants $W/ab SCORES SOFTMAX QK_UNROLL LOAD BT_PREFETCH
grep -E "^gated_mla|tuned vs default" $OUT/tune.txt | cut -c1-200
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-8
