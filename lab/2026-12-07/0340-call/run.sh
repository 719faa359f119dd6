#!/bin/bash
# One device call (< 10 minutes), carry [".dev/bin/k3k", ".dev/peers", ".dev/whl"]: the binary is main 2fcda67 (i44h and
# i45d merged: MMA=fp8,F8V=4/5).
# (2, after the MX part) issue 42: kda at the new defaults (FULLC=1, GSIG=fast, L2R=unrolled) on the six FlashKDA presets and the five
#     earlier ones, FlashKDA and FLA (Triton) in the same run, into the committed reports (SEED=1):
#     scripts/gpu_kda_flashkda.sh with NCU=0 SWEEP=0 OLD=1.
# (1) issue 45: lab/2026-12-07/mx-fp8-3/run.sh (F8V=4 vs the default and F8V=3 at M64 and M4096, the 28-expert
#     prefill, with cuBLAS bf16, torch._scaled_mm and torch._grouped_mm).
# $OUT: kda.tgz, kda-summary.md, mx.tgz, mx-table.txt, log.txt
set -u
T0=$(date +%s)
L=$OUT/log.txt
echo "start $(date -u +%T)" > $L
OUT_KDA=/tmp/o-kda; OUT_MX=/tmp/o-mx; rm -rf $OUT_KDA $OUT_MX; mkdir -p $OUT_KDA $OUT_MX
OUT=$OUT_MX timeout ${MX_S:-200} bash lab/2026-12-07/mx-fp8-3/run.sh > $OUT_MX/stdout.txt 2>&1
echo "mx rc=$? at +$(( $(date +%s) - T0 ))s" >> $L
OUT=$OUT_KDA SEED=1 NCU=0 SWEEP=0 OLD=1 BUDGET_S=${KDA_S:-320} bash scripts/gpu_kda_flashkda.sh > $OUT_KDA/stdout.txt 2>&1
echo "kda rc=$? at +$(( $(date +%s) - T0 ))s" >> $L
tar czf $OUT/kda.tgz -C $OUT_KDA . ; tar czf $OUT/mx.tgz -C $OUT_MX .
cp $OUT_KDA/summary.md $OUT/kda-summary.md 2>/dev/null; cp $OUT_MX/table.txt $OUT/mx-table.txt 2>/dev/null
cat $L; cat $OUT/kda-summary.md 2>/dev/null | head -40; cat $OUT/mx-table.txt 2>/dev/null | tail -40
