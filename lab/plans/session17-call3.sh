#!/usr/bin/env bash
# Session 17, device call 3: the 28 x 4 MXFP4 decode with longer streams per warp. Call 2 (ncu) read 57% of DRAM
# bandwidth with 16 warps per SM, 1.05 of 3.9 warps eligible: each warp streams only 7 quads (K / 4 warps) between
# a ring fill and the CTA's reduction. Here: one-warp CTAs (WA=1: a warp streams its 32 rows over the whole K, 28
# quads, no cross-warp reduction) at several occupancies (MINB), ring depths and batches; two-warp CTAs; and call 2's
# best (MINB=5) again. Then the dense M1 / M16 gemv with WA=1 and K splits, and the GLU decode preset.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=240 bash lab/plans/session17-call3.sh  (carry [".carry"], timeout_s 270)
W=/tmp/w17c; source lab/plans/lib.sh
B="PATH=gemv,PF=on,SPLIT=1"
S="$B,BK=512,BN=32,MINB=5,STAGES=3,WA=4;$B,BK=512,BN=32,MINB=16,STAGES=3,WA=1;$B,BK=512,BN=32,MINB=16,STAGES=4,WA=1"
S="$S;$B,BK=512,BN=32,MINB=16,STAGES=5,WA=1;$B,BK=256,BN=32,MINB=16,STAGES=4,WA=1;$B,BK=1024,BN=32,MINB=16,STAGES=3,WA=1"
S="$S;$B,BK=512,BN=32,MINB=12,STAGES=4,WA=1;$B,BK=512,BN=32,MINB=14,STAGES=3,WA=1;$B,BK=512,BN=64,MINB=8,STAGES=3,WA=1"
S="$S;$B,BK=512,BN=32,MINB=8,STAGES=3,WA=2;$B,BK=512,BN=32,MINB=8,STAGES=4,WA=2;$B,BK=512,BN=32,MINB=5,STAGES=4,WA=4"
S="$S;$B,BK=256,BN=32,MINB=5,STAGES=3,WA=4;PATH=gemv,PF=on,SPLIT=2,BK=512,BN=32,MINB=16,STAGES=3,WA=1"
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
timeout 150 $K bench --op mxfp4_matmul --preset "$P28" --results /nonexistent --knobs "$S" --out $W/sw > $OUT/sweep.txt 2>&1
echo "sweep 28x4 rc=$? $(date -u +%T)" >> $L
S1="PATH=gemv,MINB=4,STAGES=3;PATH=gemv,BN=32,WA=1,MINB=16,STAGES=3,SPLIT=4;PATH=gemv,BN=32,WA=1,MINB=16,STAGES=3,SPLIT=8"
S1="$S1;PATH=gemv,BN=32,WA=2,MINB=8,STAGES=3,SPLIT=4;PATH=gemv,BN=32,WA=1,MINB=16,STAGES=4,SPLIT=2"
timeout 60 $K bench --op mxfp4_matmul --preset "MXFP4 linear M1 N6144 K3584;MXFP4 linear M16 N6144 K3584" --results /nonexistent \
  --knobs "$S1" --out $W/sw1 >> $OUT/sweep.txt 2>&1; echo "sweep M1/M16 rc=$? $(date -u +%T)" >> $L
SG="$B,BK=256,BN=32,MINB=4,STAGES=3,WA=4;$B,BK=256,BN=32,MINB=5,STAGES=3,WA=4;$B,BK=512,BN=32,MINB=16,STAGES=3,WA=1;$B,BK=512,BN=32,MINB=16,STAGES=4,WA=1"
timeout 60 $K bench --op mxfp4_matmul --preset "$P28 situ_glu+p" --results /nonexistent --knobs "$SG" --out $W/swg >> $OUT/sweep.txt 2>&1
echo "sweep GLU rc=$? $(date -u +%T)" >> $L
tar czf $OUT/sweep.tgz -C $W sw sw1 swg 2>/dev/null
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "^\s+MXFP4" $OUT/sweep.txt | sed 's/rel .* ok \[/[/; s/BM=0,//; s/CPS=0,DEC=auto,DQ=auto,FIN=auto,//; s/MMA=auto,//; s/RASTER=m,//; s/,WB=0//' | cut -c1-200
