#!/usr/bin/env bash
# Session 6 device call 3: GPU primitives (wide_access, tma_multicast_cluster), kda.decode SW=1 checks + bench,
# CLUSTER=2 with the grid sized by cuOccupancyMaxActiveClusters, then the defaults (+ tuned records) of the open
# issues' operators over all their README presets in one bench per operator, peers in the same call.
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w6; mkdir -p $W/bench "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export TRITON_CACHE_DIR=$W/triton; mkdir -p $W/triton; cat .carry/triton-cache.tgz.part-* | tar xzf - -C $W/triton
L=$OUT/log.txt; echo "start $(date -u +%T)" > $L
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -l 1 > $OUT/clocks.csv 2>/dev/null & SMI=$!
timeout 60 $K bench --op latent_moe_gemm --preset "G28 mean256 K3584 N6144" --window-ms 1e4 --out $W/warm > $W/warm.txt 2>&1; echo "warm $(date -u +%T)" >> $L
K3K_GPU=1 timeout 90 .carry/gpu_primitives > $OUT/gpu_primitives.txt 2>&1; echo "gpu_primitives rc=$? $(date -u +%T)" >> $L
c() { timeout ${T:-60} $K check --backend cuda "$@" > $W/c.txt 2>&1; echo "check rc=$? [$*] $(tail -1 $W/c.txt)" >> $L; grep -i "fail\|error\|mismatch" $W/c.txt | head -3 >> $L; }
b() { timeout ${T:-150} $K bench --out $W/bench "$@" >> $OUT/bench.txt 2>&1; echo "bench rc=$? [$*] $(date -u +%T)" >> $L; }
c --op kda.decode --cases 10 --knobs KL=8,VPL=4,DW=2,SW=1
c --op kda.decode --cases 10 --knobs KL=4,VPL=2,DW=4,SW=1
c --op latent_moe_gemm --cases 8 --knobs "CLUSTER=2"
b --op kda.decode --knobs "KL=4,VPL=1,DW=4;KL=8,VPL=4,DW=2,SW=1;KL=4,VPL=2,DW=4,SW=1;KL=8,VPL=2,DW=4,SW=1;KL=4,VPL=4,DW=4,SW=1"
b --op latent_moe_gemm --preset "G28 mean256 K3584 N6144;G28 mean1024 K3584 N6144;G28 mean1024 K3072 N3584;G56 mean64 K3584 N6144;G28 mean256 K3584 N6144 situ_glu+p" --knobs "LOAD=auto;LOAD=auto,CLUSTER=2;LOAD=auto,CLUSTER=2,CLUSTER_ALONG=n"
b --op gated_mla.decode
b --op kda --preset "B1 T8192 H96 K128 safe;B1 T65536 H32 K128 safe;B1 T16384 H32 K128 exact;B4 T4096 H64 K128 safe;B1 T16384 H32 K128 safe"
b --op mxfp4_matmul --preset "MXFP4 linear M1 N6144 K3584;MXFP4 linear M16 N6144 K3584;MXFP4 decode 28 experts x 4 tokens N6144 K3584;MXFP4 decode 28 experts x 4 tokens N6144 K3584 situ_glu+p;MXFP4 linear M4096 N6144 K3584"
slug=$(ls $W/bench | head -1)
timeout 200 python3 scripts/peers.py $W/bench/$slug --out $W/peers.json > $OUT/peers.txt 2>&1; echo "peers rc=$? $(date -u +%T)" >> $L
$K bench --merge-peers $W/peers.json --out $W/bench >> $OUT/peers.txt 2>&1; cp $W/peers.json $OUT/ 2>/dev/null
kill $SMI; tar czf $OUT/bench.tgz -C $W bench; echo "end $(date -u +%T)" >> $L
grep "FAILED\|test result" $OUT/gpu_primitives.txt | tail -3
cut -c1-200 $L
grep -h "^| " $W/bench/*/*.md | grep -v "^| ---\|^| preset" | cut -c1-150
