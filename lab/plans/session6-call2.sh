#!/usr/bin/env bash
# Session 6 device call 2: GPU validation + same-call benchmarks of the h6-cluster, h6-mxdec, h6-kdast and h6-mladec
# knob values (commands from the helpers' reports), peers in the same call. Run from the repo root on the GPU machine.
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w6; mkdir -p $W/bench "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export TRITON_CACHE_DIR=$W/triton; mkdir -p $W/triton; cat .carry/triton-cache.tgz.part-* | tar xzf - -C $W/triton
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -l 1 > $OUT/clocks.csv 2>/dev/null & SMI=$!
timeout 60 $K bench --op latent_moe_gemm --preset "G28 mean256 K3584 N6144" --window-ms 2e4 --out $W/warm > $W/warm.txt 2>&1; echo "warm $(date -u +%T)" >> $L
K3K_GPU=1 timeout 90 .carry/gpu_primitives > $OUT/gpu_primitives.txt 2>&1; echo "gpu_primitives rc=$? $(date -u +%T)" >> $L
c() { timeout ${T:-60} $K check --backend cuda "$@" > $W/c.txt 2>&1; echo "check rc=$? [$*] $(tail -1 $W/c.txt)" >> $L; grep -i "fail\|error\|mismatch" $W/c.txt | head -3 >> $L; }
b() { timeout ${T:-120} $K bench --out $W/bench "$@" >> $OUT/bench.txt 2>&1; echo "bench rc=$? [$*] $(date -u +%T)" >> $L; }
# h6-cluster
c --op latent_moe_gemm --cases 10 --knobs "CLUSTER=2"
c --op latent_moe_gemm --cases 6 --knobs "CLUSTER=2,CLUSTER_ALONG=n,OVERLAP=on"
b --op latent_moe_gemm --preset "G28 mean256 K3584 N6144;G28 mean1024 K3584 N6144;G28 mean1024 K3072 N3584" --knobs "LOAD=auto;LOAD=auto,CLUSTER=2;LOAD=auto,CLUSTER=2,CLUSTER_ALONG=n;LOAD=auto,OVERLAP=on,CLUSTER=2"
# h6-mxdec
c --op mxfp4_matmul --cases 3 --dims "M=1,K=3584,N=6144,packed=1" --knobs "PATH=gemv,STAGES=8,MINB=3"
c --op mxfp4_matmul --cases 3 --dims "M=13,K=1184,N=31,packed=1" --knobs "PATH=gemv,STAGES=5,BK=512,WA=2"
c --op mxfp4_matmul --cases 3 --dims "M=16,K=3616,N=48" --knobs "PATH=gemv,STAGES=8,BM=16"
c --op mxfp4_matmul --cases 3 --dims "M=7,K=32,N=17,wide=1" --knobs "PATH=gemv,STAGES=3"
c --op mxfp4_matmul --cases 3 --dims "M=40,K=2080,N=18,wide=1" --knobs "PATH=gemv,STAGES=4,BN=32,BK=256,WA=3"
c --op mxfp4_matmul --cases 3 --dims "M=9,K=2080,N=17,packed=1" --knobs "PATH=gemv,STAGES=6,SPLIT=3,BK=256,WA=3,FIN=last"
c --op mxfp4_matmul --cases 3 --dims "G=5,c0=0,c1=4,c2=0,c3=17,c4=1,K=320,N=66,packed=1" --knobs "PATH=gemv,STAGES=8,WA=1,BK=1024"
c --op mxfp4_matmul --cases 3 --dims "G=5,c0=0,c1=4,c2=0,c3=17,c4=1,K=1184,N=66,epilogue=1,p=1" --knobs "PATH=gemv,STAGES=4,BN=32,WA=2"
c --op mxfp4_matmul --cases 3 --dims "G=28,c0=4,c1=4,c2=0,c3=4,c4=3,K=3584,N=200,packed=1" --knobs "PATH=gemv,STAGES=8,MINB=16"
c --op mxfp4_matmul --cases 10
b --op mxfp4_matmul --preset "MXFP4 linear M1 N6144 K3584" --knobs "PATH=auto;PATH=gemv,STAGES=8,MINB=3;PATH=gemv,STAGES=8,BK=1024,WA=4,MINB=4;PATH=gemv,STAGES=4"
b --op mxfp4_matmul --preset "MXFP4 linear M16 N6144 K3584" --knobs "PATH=auto;PATH=gemv,STAGES=8;PATH=gemv,STAGES=8,MINB=3;PATH=gemv,STAGES=4"
b --op mxfp4_matmul --preset "MXFP4 decode 28 experts x 4 tokens N6144 K3584" --knobs "PATH=auto;PATH=gemv,STAGES=8,MINB=16;PATH=gemv,STAGES=6,MINB=16;PATH=gemv,STAGES=8;BK=512,BN=32,DEC=expr,GR=2,MINB=4,SPLIT=1,WA=4"
b --op mxfp4_matmul --preset "MXFP4 decode 28 experts x 4 tokens N6144 K3584 situ_glu+p" --knobs "PATH=auto;PATH=gemv,STAGES=8,MINB=16;PATH=gemv,STAGES=4,MINB=12"
# h6-kdast
c --op kda --knobs "ARENA=2,CHUNK=32,W1=8" --cases 24
c --op kda --knobs "ARENA=2" --dims "N=3,L0=97,L1=1,L2=63,H=2,HV=4,K=128,V=128,safe=1,h0=1" --cases 4
c --op kda --knobs "ARENA=2" --dims "N=2,L0=95,L1=33,H=2,HV=4,K=128,V=128,safe=1,gate=1,bias=1,l2norm=1,bsig=1,h0=1" --cases 2
K3K_BENCH_STEPS=1 b --op kda --preset "B1 T8192 H96 K128 safe;B1 T65536 H32 K128 safe" --knobs "ARENA=0;ARENA=2;ARENA=2,BV=16;CHUNK=64" --reps 10
b --op kda --preset "B1 T16384 H32 K128 safe;B4 T4096 H64 K128 safe" --knobs "ARENA=0;ARENA=2"
# h6-mladec
WG="MMA=wgmma,SCORES=replicated,WN=1,SWN=0,QK_ACCS=1,BT_PREFETCH=0,QK_UNROLL=1,DVS=2"
c --op gated_mla.decode --cases 10 --seed 20261206 --knobs "BN=32,SWN=2,STAGES=4,QK_ACCS=3"
c --op gated_mla.decode --cases 10 --seed 20261206 --knobs "BN=32,SWN=2,STAGES=4,QK_ACCS=3,DIRECT=1,NSPLIT=1"
c --op gated_mla.decode --cases 8 --seed 20261207 --knobs "BN=16,SCORES=replicated,STAGES=4,QK_ACCS=3"
c --op gated_mla.decode --cases 8 --seed 20261209 --knobs "$WG,BM=64,WM=4,BN=32,STAGES=4"
c --op gated_mla.decode --cases 8 --seed 20261210 --knobs "$WG,BM=128,WM=8,BN=16,STAGES=4"
c --op gated_mla.decode --cases 2 --dims "B=3,SQ=1,H=96,l0=200,l1=65,l2=17" --knobs "$WG,BM=128,WM=8,BN=16,STAGES=4,DIRECT=1"
K3K_BENCH_STEPS=1 b --op gated_mla.decode --preset "b128 S4096 H12" --knobs "DIRECT=0;DIRECT=1;BN=32,SWN=2,STAGES=4,DIRECT=1;BN=32,SWN=2,STAGES=4,QK_ACCS=3,DIRECT=1;BN=32,SWN=2,STAGES=5,QK_ACCS=3,DIRECT=1;BN=32,SWN=2,STAGES=4,QK_ACCS=3;BN=16,SCORES=replicated,STAGES=4,QK_ACCS=3;BN=32,WN=2,STAGES=4,DIRECT=1"
b --op gated_mla.decode --preset "b128 S4096 H96" --knobs "DIRECT=0;DIRECT=1;$WG,BM=64,WM=4,BN=32,STAGES=4,DIRECT=1;$WG,BM=64,WM=4,BN=32,STAGES=3,DIRECT=1;$WG,BM=128,WM=8,BN=32,STAGES=2,DIRECT=1;$WG,BM=128,WM=8,BN=16,STAGES=4,DIRECT=1"
# peers of every benchmarked preset, same call
slug=$(ls $W/bench | head -1)
timeout 200 python3 scripts/peers.py $W/bench/$slug --out $W/peers.json > $OUT/peers.txt 2>&1; echo "peers rc=$? $(date -u +%T)" >> $L
$K bench --merge-peers $W/peers.json --out $W/bench >> $OUT/peers.txt 2>&1; cp $W/peers.json $OUT/ 2>/dev/null
kill $SMI; tar czf $OUT/bench.tgz -C $W bench; echo "end $(date -u +%T)" >> $L
grep "FAILED\|test result" $OUT/gpu_primitives.txt | tail -3
cat $L | cut -c1-230
grep -h "^| " $W/bench/*/*.md | grep -v "^| ---" | cut -c1-220
