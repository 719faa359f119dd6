#!/usr/bin/env bash
# Session 7 device call 3 (main d7d980a): GPU primitives (the codegen's wgmma descriptor and shared-address changes),
# validation + same-call A/B of kda TSPLIT (state pass overlapped with the next part's intra kernel on a
# high-priority side stream), mxfp4 dq_gemm DQ=wide (16-byte-store dequant pre-pass) and latent GEMM AHEAD /
# RELEASE=warp (deeper TMA producer stream), peers in the same call. Results are written to $OUT as they come.
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w7c; rm -rf $W; mkdir -p $W/bench $W/prof "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export TRITON_CACHE_DIR=$W/triton; mkdir -p $W/triton; cat .carry/triton-cache.tgz.part-* | tar xzf - -C $W/triton
L=$OUT/log.txt; echo "start $(date -u +%T)" > $L
c() { timeout ${T:-60} $K check --backend cuda "$@" > $W/c.txt 2>&1; echo "check rc=$? [$*] $(grep -E '^[a-z_.]+ +cuda' $W/c.txt | tr -s ' ' | tr '\n' ';')" >> $L; grep -i "fail\|error\|mismatch" $W/c.txt | head -3 >> $L; }
b() { timeout ${T:-150} $K bench --out $W/bench "$@" >> $OUT/bench.txt 2>&1; echo "bench rc=$? [$*] $(date -u +%T)" >> $L; }
K3K_GPU=1 timeout 60 .carry/gpu_primitives > $OUT/gpu_primitives.txt 2>&1; echo "gpu_primitives rc=$? $(grep 'test result' $OUT/gpu_primitives.txt)" >> $L
T=120 c --op all --cases 3
c --op latent_moe_gemm --cases 8 --knobs "AHEAD=3,RELEASE=warp"
c --op latent_moe_gemm --cases 2 --dims "G=4,c0=0,c1=3000,c2=17,c3=5000,K=200,N=2056" --knobs "AHEAD=3,RELEASE=warp"
c --op latent_moe_gemm --cases 2 --dims "G=4,c0=0,c1=3000,c2=17,c3=5000,K=72,N=2056" --knobs "AHEAD=3,OVERLAP=on"
c --op latent_moe_gemm --cases 2 --dims "G=4,c0=5,c1=3000,c2=0,c3=5000,K=136,N=2048,epilogue=1,p=1" --knobs "AHEAD=3,RELEASE=warp"
c --op kda --cases 6 --knobs "TSPLIT=4"
c --op kda --cases 1 --dims "N=1,L0=4000,H=4,K=128,V=128,safe=1" --knobs "TSPLIT=8,STAGES=2"
c --op kda --cases 1 --dims "N=6,L0=1,L1=15,L2=2000,L3=63,L4=0,L5=1300,H=2,HV=4,K=128,V=128,h0=1" --knobs "TSPLIT=8"
c --op mxfp4_matmul --cases 20 --knobs "PATH=dq_gemm,DQ=wide"
c --op mxfp4_matmul --cases 10 --knobs "PATH=dq_gemm,DQ=wide,DQU=2,DQP=4"
b --op latent_moe_gemm --preset "G28 mean256 K3584 N6144;G28 mean1024 K3584 N6144;G28 mean1024 K3072 N3584;G56 mean64 K3584 N6144" --knobs "LOAD=auto;LOAD=auto,AHEAD=3;LOAD=auto,AHEAD=3,RELEASE=warp;LOAD=auto,AHEAD=2"
T=200 b --op kda --preset "B1 T8192 H96 K128 safe;B1 T65536 H32 K128 safe;B1 T16384 H32 K128 safe;B4 T4096 H64 K128 safe" --knobs "TSPLIT=1;TSPLIT=4;TSPLIT=8;TSPLIT=8,STAGES=2"
b --op mxfp4_matmul --preset "MXFP4 linear M4096 N6144 K3584;MXFP4 prefill 28 experts mean1024 N6144 K3584" --knobs "PATH=dq_gemm,DQ=tile;PATH=dq_gemm,DQ=wide;PATH=dq_gemm,DQ=wide,DQU=2;PATH=dq_gemm,DQ=wide,DQP=4"
tar czf $OUT/c.tgz -C $W bench
slug=$(ls $W/bench | head -1)
timeout 170 python3 scripts/peers.py $W/bench/$slug --out $W/peers.json > $OUT/peers.txt 2>&1; echo "peers rc=$? $(date -u +%T)" >> $L
$K bench --merge-peers $W/peers.json --out $W/bench >> $OUT/peers.txt 2>&1
tar czf $OUT/c.tgz -C $W bench; echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-300
grep -h "^| " $W/bench/*/*.md | grep -v "^| ---\|^| preset" | cut -c1-170
