#!/usr/bin/env bash
# One device call for issues 42 and 45 (under 9 minutes):
# 1. KDA against FlashKDA on the six presets and the five earlier ones (FLA skipped: its Triton compile alone takes
#    the time this call has), with the ncu full-set profile of the intra kernel (scripts/gpu_kda_flashkda.sh,
#    FLA=0 OLD=1 PROFILE=1 SWEEP=0 NCU=0);
# 2. the MXFP4 x MXFP8 FP8 path against the default and the peers (lab/2026-12-06/mx-fp8/run.sh).
# Carried: .dev/bin/k3k, .dev/peers (FlashKDA sources and build script).
set -uo pipefail
T0=$(date +%s)
FINAL=${OUT:-./gpu-out}; mkdir -p "$FINAL"
echo "== KDA $(date -u +%T)"
OUT=/tmp/kda-out BUDGET_S=${KDA_S:-530} FLA=0 OLD=1 PROFILE=1 SWEEP=0 NCU=0 bash scripts/gpu_kda_flashkda.sh > /tmp/kda-run.txt 2>&1
echo "kda rc=$? after $(( $(date +%s) - T0 ))s"
cp /tmp/kda-out/summary.md "$FINAL/kda-summary.md" 2>/dev/null
mv /tmp/kda-out/intra-profile.tgz "$FINAL/" 2>/dev/null
cp /tmp/kda-run.txt /tmp/kda-out/run.txt; tar czf "$FINAL/kda.tgz" -C /tmp kda-out
echo "== MX $(date -u +%T)"
OUT=/tmp/mx-out timeout $(( 560 - ($(date +%s) - T0) )) bash lab/2026-12-06/mx-fp8/run.sh > /tmp/mx-run.txt 2>&1
echo "mx rc=$? after $(( $(date +%s) - T0 ))s"
cp /tmp/mx-run.txt /tmp/mx-out/run.txt 2>/dev/null; cp /tmp/mx-out/table.txt "$FINAL/mx-table.txt" 2>/dev/null
tar czf "$FINAL/mx.tgz" -C /tmp mx-out
ls -la "$FINAL"
echo "== KDA"; cat "$FINAL/kda-summary.md" | head -30
echo "== MX"; tail -40 /tmp/mx-run.txt
