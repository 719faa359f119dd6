#!/usr/bin/env bash
# Session 17, device call 6: call 5's ncu of the 28 x 4 gemv default put 10.7% of the warps' stall samples on the
# CTA's final barrier: at BK=256 the 14 batches of K=3584 split 4/4/3/3 over the 4 warps. Balanced splits (BK=128:
# 7 batches per warp; 7 warps: 2 or 1 per warp) against the default in one bench run, the GLU preset too.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=150 bash lab/plans/session17-call6.sh  (carry [".carry"], timeout_s 170)
W=/tmp/w17f; source lab/plans/lib.sh
B="PATH=gemv,PF=on,SPLIT=1,BN=32"
S="$B,BK=256,MINB=5,STAGES=3,WA=4;$B,BK=128,MINB=5,STAGES=3,WA=4;$B,BK=128,MINB=5,STAGES=4,WA=4;$B,BK=128,MINB=5,STAGES=5,WA=4"
S="$S;$B,BK=256,MINB=3,STAGES=3,WA=7;$B,BK=512,MINB=3,STAGES=3,WA=7;$B,BK=128,MINB=3,STAGES=3,WA=7;$B,BK=512,MINB=2,STAGES=3,WA=7"
S="$S;$B,BK=256,MINB=5,STAGES=3,WA=4"
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
timeout 100 $K bench --op mxfp4_matmul --preset "$P28" --results /nonexistent --knobs "$S" --out $W/sw > $OUT/sweep.txt 2>&1
echo "sweep 28x4 rc=$? $(date -u +%T)" >> $L
SG="$B,BK=256,MINB=5,STAGES=3,WA=4;$B,BK=128,MINB=5,STAGES=3,WA=4;$B,BK=128,MINB=5,STAGES=4,WA=4"
timeout 50 $K bench --op mxfp4_matmul --preset "$P28 situ_glu+p" --results /nonexistent --knobs "$SG" --out $W/swg >> $OUT/sweep.txt 2>&1
echo "sweep GLU rc=$? $(date -u +%T)" >> $L
tar czf $OUT/sweep.tgz -C $W sw swg 2>/dev/null
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "^\s+MXFP4" $OUT/sweep.txt | sed 's/rel .* ok \[/[/; s/BM=0,//; s/CPS=0,DEC=auto,DQ=auto,FIN=auto,//; s/MMA=auto,//; s/RASTER=m,//; s/,WB=0//' | cut -c1-200
