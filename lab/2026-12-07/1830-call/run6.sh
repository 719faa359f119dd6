#!/bin/bash
# Device call, carry [".dev"]: issue 45's wide-tile split rows (1600-call/run5.sh, ~120 s) into $OUT/r45, then
# 1600-call/run4.sh (GPU checks of kda after the bias change, A/B against 2a45191, the KDA report on an H200)
# with the rest of the call's 560 s.
T0=$(date +%s)
OUT=${OUT:-/tmp/o6}; mkdir -p $OUT/r45
OUT=$OUT/r45 timeout 150 bash lab/2026-12-07/1600-call/run5.sh > $OUT/r45/stdout.txt 2>&1
tail -n 20 $OUT/r45/stdout.txt
OUT=$OUT BUDGET_S=$(( 560 - ($(date +%s) - T0) )) bash lab/2026-12-07/1600-call/run4.sh
