#!/usr/bin/env bash
# RAN as session 28's call 10, on an H100 (lab/2026-12-05/1953-h100-run/); the bench hit its
# 200 s timeout before BN=128 at 112 experts.
# Session 28, call 10 (issue 4): does the decode's fixed cost follow the tile's size? Call 8 fitted t = F + bytes / R
# at 14-112 experts: F = 21.2 us at BN=64 and 19.4 at BN=32 against the read's 14.4, R 3.6% under the read's. If F
# is the tail of CTAs that each stream one tile (122 KB at 64 rows), it should fall further at 16 rows and rise at
# 128: the same sweep at BN=16 (MINB=7, 72 registers) and BN=128 (MINB=2), with auto again as the baseline.
# On an H200: session28-call3.sh (the H200 plan) instead.
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=200 bash lab/plans/session28-call10.sh  (carry [".carry"], timeout_s 580, kind nvidia-h200)
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  BUDGET_S=470 exec bash lab/plans/session28-call3.sh
fi
W=/tmp/w28c10; source lab/plans/lib.sh
size_sweep "PATH=auto;BN=16,BK=128,MINB=7;BN=128,BK=128,MINB=2" noread
pack; echo "end $(date -u +%T)" >> $L; cat $L
