#!/usr/bin/env bash
# Session 17, device call 1: the packed MXFP4 layout v2 (k3k_ir::fp4: each pair of a lane's word decoded by a
# funnel shift or a carry-free multiply and a mask, 3.0 SASS instructions per bf16x2 against 4.75) on the GPU.
#  1. `k3k check --backend cuda` of every decoder that reads packed words: random cases, then pinned knob points
#     (gemv register ring and staged ring, tile DEC=bits (prelude) and DEC=expr (IR fp4_pair), wgmma, stream,
#     dq_gemm DQ=wide / tile), and the latent GEMM's odd-slice bulk-store kernels (session 16's race fix, not yet
#     run on a GPU).
#  2. A/B in one binary: 28 x 4 decode packed (new decode) vs natural (the old decode's prmt path) at the tuned
#     gemv point and the defaults.
#  3. `k3k tune --op mxfp4_matmul --preset k3` (round 1 re-times the stale winners), then the bench of every
#     preset with cuBLAS in the same call, then a GPU fuzz.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=560 bash lab/plans/session17-call1.sh  (carry [".carry"], timeout_s 590)
W=/tmp/w17a; source lab/plans/lib.sh
C=$OUT/check.txt
ck() { timeout $1 $K check --backend cuda --op $2 "${@:3}" >> $C 2>&1; echo "check $2 ${*:3} rc=$? $(date -u +%T)" | cut -c1-200 >> $L; }
ck 120 mxfp4_matmul --cases 24
D28="G=28,per=4,N=6144,K=3584,packed=1"
ck 40 mxfp4_matmul --dims "$D28" --knobs "PATH=gemv,BK=512,BN=32,GR=2,PF=on,WA=4"
ck 40 mxfp4_matmul --dims "G=5,per=3,N=320,K=1120,packed=1" --knobs "PATH=gemv,STAGES=4" --cases 3
ck 40 mxfp4_matmul --dims "M=64,N=512,K=1056,packed=1" --knobs "PATH=tile" --cases 3
ck 40 mxfp4_matmul --dims "M=64,N=512,K=1056,packed=1" --knobs "PATH=tile,DEC=expr" --cases 3
ck 40 mxfp4_matmul --dims "M=256,N=512,K=1024,packed=1" --knobs "PATH=tile,MMA=wgmma" --cases 3
ck 40 mxfp4_matmul --dims "M=9,N=512,K=1056,packed=1" --knobs "PATH=stream,MMA=sync,WB=1" --cases 3
ck 40 mxfp4_matmul --dims "M=300,N=512,K=1024,packed=1,wide=1" --knobs "PATH=dq_gemm,DQ=wide" --cases 3
ck 40 mxfp4_matmul --dims "M=300,N=512,K=1024,packed=1" --knobs "PATH=dq_gemm,DQ=tile" --cases 3
for kn in "STORE=tma,BN=64" "STORE=tma,BN=192"; do ck 45 latent_moe_gemm --knobs "$kn" --cases 6; done
ck 45 latent_moe_gemm --dims "G=28,mean=256,K=3584,N=6144,epilogue=1,p=1" --knobs "STORE=tma,BN=128" --cases 2
grep -iE "fail|error|mismatch" $C | grep -v " 0 fail" | head -8 >> $L
# 2. A/B (every knob set's time is kept in the JSON).
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
timeout 90 $K bench --op mxfp4_matmul --preset "$P28;$P28 natural" --results /nonexistent \
  --knobs "PATH=gemv,BK=512,BN=32,GR=2,PF=on,WA=4;PATH=auto" --out $W/ab > $OUT/ab.txt 2>&1; echo "ab rc=$? $(date -u +%T)" >> $L
tar czf $OUT/ab.tgz -C $W ab 2>/dev/null
# 3. Tune, bench with peers, fuzz.
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
timeout 150 $K tune --op mxfp4_matmul --preset k3 --budget 120s --max-candidates 16 --results $W/results > $OUT/tune.txt 2>&1
echo "tune rc=$? $(date -u +%T)" >> $L; pack
op mxfp4_matmul 100 70
[ "$(left)" -gt 45 ] && { timeout $(( $(left) - 10 )) $K fuzz --backend cuda --op mxfp4_matmul --time $(( $(left) - 25 ))s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L; tail -2 $OUT/fuzz.txt >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "^mxfp4" $OUT/tune.txt | cut -c1-160
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-8
