#!/bin/bash
# Device call on the machine run7.sh left warm, carry [".dev"]: on an H200, issue 42's report with the new binary
# (scripts/gpu_kda_flashkda.sh, FLA=0); on an H100, issue 45's wide-tile rows (1600-call/run5.sh) and then the
# same report (FLA=0) into $OUT/rep with the time left (the H100 report at this binary).
set -u
T0=$(date +%s); BUDGET=${BUDGET_S:-570}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/o8}; GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$GPU $(date -u +%FT%TZ)"
if ! echo "$GPU" | grep -q H200; then
  mkdir -p $OUT/r45; OUT=$OUT/r45 timeout 150 bash lab/2026-12-07/1600-call/run5.sh > $OUT/r45/stdout.txt 2>&1
  echo "r45 rc=$?"; tail -n 16 $OUT/r45/stdout.txt
fi
mkdir -p $OUT/rep; OUT=$OUT/rep SEED=1 NCU=0 SWEEP=0 OLD=1 FLA=0 BUDGET_S=$(( $(left) - 10 )) bash scripts/gpu_kda_flashkda.sh > $OUT/report-stdout.txt 2>&1
echo "report rc=$?"; cat $OUT/rep/summary.md 2>/dev/null | head -30
