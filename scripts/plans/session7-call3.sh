#!/usr/bin/env bash
# Session 7 device call 3: GPU validation + same-call A/B of kda TSPLIT (state pass overlapped with the next part's
# intra kernel on a high-priority side stream) and mxfp4 dq_gemm DQ=wide (16-byte-store dequant pre-pass), peers in
# the same call; compute-sanitizer memcheck of the new paths.
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w7c; rm -rf $W; mkdir -p $W/bench $W/prof "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export TRITON_CACHE_DIR=$W/triton; mkdir -p $W/triton; cat .carry/triton-cache.tgz.part-* | tar xzf - -C $W/triton
L=$OUT/log.txt; echo "start $(date -u +%T)" > $L
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -l 1 > $OUT/clocks.csv 2>/dev/null & SMI=$!
c() { timeout ${T:-60} $K check --backend cuda "$@" > $W/c.txt 2>&1; echo "check rc=$? [$*] $(grep -E '^(kda|mxfp4)' $W/c.txt | tail -2 | tr -s ' ' | tr '\n' ' ')" >> $L; grep -i "fail\|error\|mismatch" $W/c.txt | head -3 >> $L; }
b() { timeout ${T:-150} $K bench --out $W/bench "$@" >> $OUT/bench.txt 2>&1; echo "bench rc=$? [$*] $(date -u +%T)" >> $L; }
# h7-kdasplit
c --op kda --cases 8 --knobs "TSPLIT=4"
c --op kda --cases 2 --dims "N=1,L0=4000,H=4,K=128,V=128,safe=1" --knobs "TSPLIT=8,STAGES=2"
c --op kda --cases 1 --dims "N=6,L0=1,L1=15,L2=2000,L3=63,L4=0,L5=1300,H=2,HV=4,K=128,V=128,h0=1" --knobs "TSPLIT=8"
# h7-mxdq
c --op mxfp4_matmul --cases 30 --knobs "PATH=dq_gemm,DQ=wide"
c --op mxfp4_matmul --cases 20 --knobs "PATH=dq_gemm,DQ=wide,DQU=1,DQP=4"
c --op mxfp4_matmul --cases 20 --knobs "PATH=dq_gemm,DQ=wide,DQU=8"
T=200 b --op kda --preset "B1 T8192 H96 K128 safe;B1 T65536 H32 K128 safe;B1 T16384 H32 K128 safe;B1 T16384 H32 K128 exact;B4 T4096 H64 K128 safe" --knobs "TSPLIT=1;TSPLIT=2;TSPLIT=4;TSPLIT=8;TSPLIT=4,STAGES=2;TSPLIT=8,STAGES=2;TSPLIT=16"
b --op mxfp4_matmul --preset "MXFP4 linear M4096 N6144 K3584;MXFP4 linear M4096 N6144 K3584 natural;MXFP4 prefill 28 experts mean1024 N6144 K3584" --knobs "PATH=dq_gemm,DQ=tile;PATH=dq_gemm,DQ=wide;PATH=dq_gemm,DQ=wide,DQU=1;PATH=dq_gemm,DQ=wide,DQU=2;PATH=dq_gemm,DQ=wide,DQU=8;PATH=dq_gemm,DQ=wide,DQP=4;PATH=dq_gemm,DQ=wide,DQU=2,DQP=8"
slug=$(ls $W/bench | head -1)
timeout 200 python3 scripts/peers.py $W/bench/$slug --out $W/peers.json > $OUT/peers.txt 2>&1; echo "peers rc=$? $(date -u +%T)" >> $L
$K bench --merge-peers $W/peers.json --out $W/bench >> $OUT/peers.txt 2>&1
# the pre-pass alone, old vs new (ncu, locked clocks)
timeout 60 ncu --kernel-name regex:dq_w --launch-count 2 --section SpeedOfLight $K bench --op mxfp4_matmul --preset "MXFP4 linear M4096 N6144 K3584" --knobs "PATH=dq_gemm,DQ=tile;PATH=dq_gemm,DQ=wide" --reps 1 --window-ms 0 --out $W/pb > $W/prof/dq.txt 2>&1; echo "ncu dq rc=$?" >> $L
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $K check --backend cuda --op mxfp4_matmul --cases 3 --knobs "PATH=dq_gemm,DQ=wide" > $W/prof/memcheck-mx.txt 2>&1; echo "memcheck mx rc=$? $(grep -c 'Invalid\|ERROR SUMMARY' $W/prof/memcheck-mx.txt) $(grep 'ERROR SUMMARY' $W/prof/memcheck-mx.txt)" >> $L
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $K check --backend cuda --op kda --cases 2 --knobs "TSPLIT=4" > $W/prof/memcheck-kda.txt 2>&1; echo "memcheck kda rc=$? $(grep 'ERROR SUMMARY' $W/prof/memcheck-kda.txt)" >> $L
kill $SMI; tar czf $OUT/c.tgz -C $W bench prof; echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-250
grep -h "^| " $W/bench/*/*.md | grep -v "^| ---\|^| preset" | cut -c1-170
grep -E "^  k3k_|Duration|DRAM Throughput" $W/prof/dq.txt | cut -c1-120
