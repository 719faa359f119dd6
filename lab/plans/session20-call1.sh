#!/usr/bin/env bash
# Ran as session 20 call 1 (2026-12-05 02:35 UTC, binary of 85b6175-era HEAD, no kernel changed since session 19): outputs in lab/2026-12-05/0241-h200-run/.
# Ready for the next session's first device call (written at the end of session 18, whose device was not lent again
# after call 3): the MLA decode's automatic knobs from 64 rows as committed (VWG=2 DVS=1, fast softmax, rolled; the
# same as call 3's binary) re-published so that the report's config column shows the knobs the kernels were built
# with (`kernel_knobs`, new in this build), `k3k check --backend cuda`, the neighbours at b128 S4096 H96 in one run
# (exact softmax unrolled: 0.4502 in call 2, no spills; fast unrolled: spills 8-20 bytes; the former default), and a
# GPU fuzz of the decode; an ncu profile of the new decode (stall reasons, tensor pipe, L2 and DRAM bytes); the GPU
# primitive tests (`K3K_GPU=1`: among them the new replicated and column-banded
# `wgmma` accumulators, and session 17's packed MXFP4 expectations, not run on a GPU since). Rename it to the
# session's call name when it runs, and commit its output. At most 8 files under $OUT.
# Session 19 (no device lent) added the decode with SCORES=shared (warpgroup 0 alone computes the scores and passes P
# through shared memory; new `first_warpgroups` IR bodies): checked on the GPU (both softmaxes), timed beside the
# automatic knobs at H96 (rolled / unrolled, fast / exact), fuzzed, profiled; the GPU primitives include the new
# `first_warpgroups_share_p` case. Also new: `LOAD=tma` for the wgmma decode (thread 0 issues bulk copies of page
# rows on full / empty mbarriers; no block barrier per tile), checked and timed with replicated and shared scores.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k;
#   cp $(cargo test --release -p k3k-codegen --test gpu_primitives --no-run 2>&1 | grep -o 'target/release/deps/gpu_primitives-[0-9a-f]*') .carry/gpu_primitives
# Run: BUDGET_S=540 bash lab/plans/session20-call1.sh  (carry [".carry"], timeout_s 570)
W=/tmp/wnext; source lab/plans/lib.sh
C=$OUT/check.txt
G="MMA=wgmma,WN=1,SWN=0,QK_ACCS=1,BT_PREFETCH=0,BM=64,WM=4,BN=64,STAGES=2,DVS=1,VWG=2"
SH="$G,SCORES=shared"
timeout 60 $K check --backend cuda --op gated_mla.decode --cases 12 >> $C 2>&1; echo "check decode random rc=$? $(date -u +%T)" >> $L
timeout 60 $K check --backend cuda --op gated_mla.decode --knobs "$G,SCORES=replicated,QK_UNROLL=0,SOFTMAX=fast" --cases 8 >> $C 2>&1; echo "check decode default rc=$? $(date -u +%T)" >> $L
timeout 60 $K check --backend cuda --op gated_mla.decode --knobs "$SH,QK_UNROLL=0,SOFTMAX=fast" --cases 12 >> $C 2>&1; echo "check decode shared fast rc=$? $(date -u +%T)" >> $L
timeout 60 $K check --backend cuda --op gated_mla.decode --knobs "$SH,QK_UNROLL=1,SOFTMAX=exact" --cases 12 >> $C 2>&1; echo "check decode shared exact rc=$? $(date -u +%T)" >> $L
timeout 60 $K check --backend cuda --op gated_mla.decode --knobs "$SH,BN=32,STAGES=4,OVERLAP=true,QK_UNROLL=0,SOFTMAX=fast" --cases 12 >> $C 2>&1; echo "check decode shared overlap rc=$? $(date -u +%T)" >> $L
# A LOAD=tma check that times out (a hung mbarrier protocol) drops the LOAD=tma sets from the timing runs below,
# which would otherwise lose every set of their run.
TMA_OK=1
timeout 60 $K check --backend cuda --op gated_mla.decode --knobs "$G,SCORES=replicated,LOAD=tma,QK_UNROLL=0,SOFTMAX=fast" --cases 12 >> $C 2>&1; rc=$?; [ $rc -eq 124 ] && TMA_OK=0; echo "check decode tma rc=$rc $(date -u +%T)" >> $L
timeout 60 $K check --backend cuda --op gated_mla.decode --knobs "BM=16,BN=32,BT_PREFETCH=0,DVS=1,MMA=sync,QK_ACCS=1,QK_UNROLL=0,SCORES=shared,STAGES=5,SWN=2,WM=1,WN=4,LOAD=tma" --cases 12 >> $C 2>&1; rc=$?; [ $rc -eq 124 ] && TMA_OK=0; echo "check decode sync tma rc=$rc $(date -u +%T)" >> $L
timeout 60 $K check --backend cuda --op gated_mla.decode --knobs "$SH,LOAD=tma,BN=32,STAGES=4,OVERLAP=true,QK_UNROLL=0,SOFTMAX=fast" --cases 12 >> $C 2>&1; rc=$?; [ $rc -eq 124 ] && TMA_OK=0; echo "check decode tma shared overlap rc=$rc $(date -u +%T)" >> $L
grep -E "cases, [0-9]+ failed" $C | sort | uniq -c >> $L
K3K_GPU=1 timeout 90 .carry/gpu_primitives > $OUT/gpu_primitives.txt 2>&1; echo "gpu_primitives rc=$? $(grep 'test result' $OUT/gpu_primitives.txt) $(date -u +%T)" >> $L
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
op gated_mla.decode 100 60
rm -f $OUT/results.tgz
V="$G,SCORES=replicated,QK_UNROLL=0,SOFTMAX=fast;$SH,QK_UNROLL=0,SOFTMAX=fast;$SH,QK_UNROLL=1,SOFTMAX=fast;$SH,QK_UNROLL=1,SOFTMAX=exact;$SH,QK_UNROLL=0,SOFTMAX=exact;$G,SCORES=replicated,QK_UNROLL=1,SOFTMAX=exact;$SH,BN=32,STAGES=4,QK_UNROLL=0,SOFTMAX=fast;$SH,BN=32,STAGES=4,OVERLAP=true,QK_UNROLL=0,SOFTMAX=fast;$SH,BN=32,STAGES=3,OVERLAP=true,QK_UNROLL=0,SOFTMAX=fast;$G,SCORES=replicated,LOAD=tma,QK_UNROLL=0,SOFTMAX=fast;$G,SCORES=replicated,LOAD=tma,QK_UNROLL=1,SOFTMAX=fast;$SH,LOAD=tma,QK_UNROLL=0,SOFTMAX=fast;$SH,LOAD=tma,QK_UNROLL=1,SOFTMAX=fast;$SH,LOAD=tma,BN=32,STAGES=4,OVERLAP=true,QK_UNROLL=0,SOFTMAX=fast"
drop_tma() { [ $TMA_OK -eq 1 ] && echo "$1" || echo "$1" | tr ';' '\n' | grep -v LOAD=tma | paste -sd';'; }
V=$(drop_tma "$V"); echo "TMA_OK=$TMA_OK" >> $L
[ "$(left)" -gt 60 ] && { timeout 180 $K bench --op gated_mla.decode --preset "b128 S4096 H96" --knobs "$V" --results /nonexistent --out $W/ab >> $OUT/bench.txt 2>&1; echo "ab rc=$? $(date -u +%T)" >> $L; tar czf $OUT/ab.tgz -C $W ab; }
# H12 (the mma.sync kernel): the automatic knobs against LOAD=tma (64-key stages; 5-deep 32-key rings).
Y="BM=16,BN=64,BT_PREFETCH=0,DVS=1,MMA=sync,QK_ACCS=1,QK_UNROLL=0,SCORES=shared,STAGES=2,SWN=0,WM=1,WN=4"
V12="$Y;$Y,LOAD=tma;$Y,LOAD=tma,BN=32,SWN=2,STAGES=5;$Y,LOAD=tma,BN=32,SWN=2,STAGES=3,QK_ACCS=3"
V12=$(drop_tma "$V12")
[ "$(left)" -gt 60 ] && { timeout 60 $K bench --op gated_mla.decode --preset "b128 S4096 H12" --knobs "$V12" --results /nonexistent --out $W/ab12 >> $OUT/bench.txt 2>&1; echo "ab12 rc=$? $(date -u +%T)" >> $L; tar czf $OUT/ab.tgz -C $W ab ab12; }
# What bounds the decode (ncu, first launch, clocks left alone): stall reasons and the tensor pipe, the automatic
# knobs and SCORES=shared.
mkdir -p $W/prof
M="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum,dram__bytes_read.sum,gpu__time_duration.sum"
for v in "auto:" "shared:$SH,QK_UNROLL=0,SOFTMAX=fast"; do n=${v%%:*}; kn=${v#*:}
  [ "$(left)" -gt 90 ] && { timeout 60 ncu --clock-control none --kernel-name "regex:k3k_mla_decode" --launch-count 1 --metrics "$M" \
    $K bench --op gated_mla.decode --preset "b128 S4096 H96" ${kn:+--knobs "$kn"} --reps 1 --window-ms 0 --results /nonexistent --out $W/pb-$n > $W/prof/$n.txt 2>&1
    echo "ncu $n rc=$? $(date -u +%T)" >> $L; tar czf $OUT/ab.tgz -C $W ab ab12 prof; }
done
[ "$(left)" -gt 40 ] && { timeout 40 $K fuzz --backend cuda --op gated_mla.decode --knobs "$SH,QK_UNROLL=0,SOFTMAX=fast" --time 25s > $OUT/fuzz.txt 2>&1; echo "fuzz shared rc=$? $(date -u +%T)" >> $L; tail -2 $OUT/fuzz.txt >> $L; }
[ "$(left)" -gt 30 ] && { timeout $(( $(left) - 8 )) $K fuzz --backend cuda --op gated_mla.decode --time $(( $(left) - 20 ))s >> $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L; tail -2 $OUT/fuzz.txt >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-8
variants $W/ab SCORES SOFTMAX QK_UNROLL BN STAGES OVERLAP LOAD
variants $W/ab12 LOAD BN STAGES QK_ACCS
for n in auto shared; do echo "== ncu $n"; grep -E "stalled|gmma|bytes|duration" $W/prof/$n.txt 2>/dev/null | awk '{print $1, $(NF-1), $NF}' | sort -k3 -g -r | head -12; done
