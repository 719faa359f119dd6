#!/usr/bin/env bash
# Ready for the next session's second device call (written in session 19, which had no device): `k3k tune` of the
# MLA decode at both presets from the committed records. Its round 2 now explores one knob away from the knobs the
# defaults build (the wgmma kernel from 64 rows: SCORES=shared, LOAD=tma, the unrolled or exact softmax, ...; the
# 16-row mma.sync kernel at H12: LOAD=tma, ...), which earlier tunes could not reach. Then the bench of both presets
# with the tuned records and the torch decode path in the same call, and a GPU fuzz of the decode. Run it after
# next-call.sh (whose checks cover the new kernels), or instead of it if only one call is lent. At most 8 files.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=540 bash scripts/plans/next-call-2.sh  (carry [".carry"], timeout_s 570)
W=/tmp/wnext2; source scripts/plans/lib.sh
timeout 60 $K check --backend cuda --op gated_mla.decode --cases 16 > $OUT/check.txt 2>&1; echo "check decode rc=$? $(date -u +%T)" >> $L
grep -E "cases, [0-9]+ failed" $OUT/check.txt >> $L
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
timeout 280 $K tune --op gated_mla.decode --budget 250s --max-candidates 60 --results $W/results > $OUT/tune.txt 2>&1
echo "tune rc=$? $(date -u +%T)" >> $L; pack
op gated_mla.decode 80 60
[ "$(left)" -gt 40 ] && { timeout $(( $(left) - 10 )) $K fuzz --backend cuda --op gated_mla.decode --tuned --results $W/results --time $(( $(left) - 25 ))s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L; tail -2 $OUT/fuzz.txt >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "^gated_mla|tuned vs default" $OUT/tune.txt | cut -c1-200
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-8
