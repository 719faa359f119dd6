#!/bin/bash
# One device call (< 10 minutes), carry [".dev"] (the stripped release binary of the integration of branches i42c
# and i45c on main): issue 42's intra-kernel variants (lab/2026-12-07/kda-intra/run.sh, no FlashKDA: the variants
# against each other), then issue 45's M = 8..256 sweep with its peers (lab/2026-12-07/mx-small-m/run.sh, into
# $OUT/mx).
set -u
T0=$(date +%s)
BUDGET_S=${KDA_S:-300} FK=0 bash lab/2026-12-07/kda-intra/run.sh > /tmp/kda-intra-run.txt 2>&1
echo "kda part: rc=$? after $(( $(date +%s) - T0 )) s"
mkdir -p $OUT/mx
OUT=$OUT/mx timeout ${MX_S:-245} bash lab/2026-12-07/mx-small-m/run.sh > /tmp/mx-run.txt 2>&1
echo "mx part: rc=$? after $(( $(date +%s) - T0 )) s"
cat $OUT/summary.md 2>/dev/null | head -50
tail -25 $OUT/mx/table.txt 2>/dev/null
