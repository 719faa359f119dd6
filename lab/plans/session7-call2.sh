#!/usr/bin/env bash
# Session 7 device call 2: kda.decode with the flat contiguous grid (check, layouts A/B, FLA in the same call, ncu),
# and the stall reasons of the default GEMM at mean1024.
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w7b; rm -rf $W; mkdir -p $W/bench $W/prof "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export TRITON_CACHE_DIR=$W/triton; mkdir -p $W/triton; cat .carry/triton-cache.tgz.part-* | tar xzf - -C $W/triton
L=$OUT/log.txt; echo "start $(date -u +%T)" > $L
c() { timeout ${T:-60} $K check --backend cuda "$@" > $W/c.txt 2>&1; echo "check rc=$? [$*] $(tail -1 $W/c.txt)" >> $L; grep -i "fail\|error\|mismatch" $W/c.txt | head -3 >> $L; }
b() { timeout ${T:-150} $K bench --out $W/bench "$@" >> $OUT/bench.txt 2>&1; echo "bench rc=$? [$*] $(date -u +%T)" >> $L; }
c --op kda.decode --cases 24
c --op kda.decode --cases 12 --knobs KL=8,VPL=2,DW=1,SW=1
b --op kda.decode --knobs "KL=4,VPL=1,DW=4;KL=8,VPL=2,DW=4,SW=1;KL=8,VPL=4,DW=2,SW=1;KL=4,VPL=2,DW=4,SW=1;KL=8,VPL=1,DW=4;KL=2,VPL=1,DW=4;KL=4,VPL=1,DW=2;KL=4,VPL=1,DW=1"
slug=$(ls $W/bench | head -1)
timeout 120 python3 scripts/peers.py $W/bench/$slug --out $W/peers.json > $OUT/peers.txt 2>&1; echo "peers rc=$? $(date -u +%T)" >> $L
$K bench --merge-peers $W/peers.json --out $W/bench >> $OUT/peers.txt 2>&1
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section SchedulerStats"
timeout 60 ncu --kernel-name regex:. --launch-count 1 $SEC $K bench --op kda.decode --preset "N256 H32 K128 decode" --knobs KL=4,VPL=1,DW=4 --reps 2 --window-ms 0 --out $W/pb > $W/prof/kdadec-n256-flat.txt 2>&1; echo "ncu kdadec rc=$?" >> $L
timeout 90 ncu --kernel-name regex:gemm --launch-count 1 --section WarpStateStats --section SourceCounters --print-details all --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio" $K bench --op latent_moe_gemm --preset "G28 mean1024 K3584 N6144" --knobs LOAD=auto --reps 2 --window-ms 0 --out $W/pb > $W/prof/gemm-stalls.txt 2>&1; echo "ncu gemm rc=$?" >> $L
tar czf $OUT/b.tgz -C $W bench prof; echo "end $(date -u +%T)" >> $L
cat $L
grep -h "^| " $W/bench/*/*.md | grep -v "^| ---\|^| preset" | cut -c1-170
grep -E "Duration|DRAM Throughput" $W/prof/kdadec-n256-flat.txt
grep -E "stalled_[a-z_]+_per_issue_active.ratio" $W/prof/gemm-stalls.txt | awk '{print $1, $NF}' | sort -k2 -g -r | head -12
